"""`kubetrain run`'s guard: a stop signal that came before it starts no step, and it hands the signals back."""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from kubetrain.commands import demo as demo_command
from kubetrain.commands import run as run_command
from kubetrain.errors import ExitCode
from kubetrain.launcher.signals import SignalEvent
from kubetrain.tooling.cancel import RunCancelled, RunGuard


def test_a_signal_before_the_guard_starts_no_step() -> None:
    """What `hold_signals` recorded while kfp and the pipeline loaded: the run is cancelled at once."""
    cancel = SignalEvent()
    cancel.signal_name = "SIGINT"
    cancel.set()
    started: list[str] = []
    with RunGuard(cancel=cancel) as guard:
        assert guard.cancelled
        with pytest.raises(RunCancelled) as stopped, guard.running_steps():
            started.append("a step")
    assert started == []
    assert stopped.value.before_any_step
    assert stopped.value.signal_name == "SIGINT"


def test_the_guard_restores_the_handlers_it_found() -> None:
    """On exit the command's holding handlers come back (not the default action, which is exit 143)."""

    def holding(signum: int, frame: object) -> None:
        pass

    previous = {sig: signal.signal(sig, holding) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with RunGuard():
            assert signal.getsignal(signal.SIGTERM) is not holding
        assert signal.getsignal(signal.SIGTERM) is holding
        assert signal.getsignal(signal.SIGINT) is holding
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("command", [run_command, demo_command])
def test_run_and_demo_hold_the_stop_signals_from_their_first_line(
    command: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM while the command loads is recorded for the run (no exit 143), and ignored once it is done."""
    seen: list[tuple[bool, str | None]] = []

    def body(args: argparse.Namespace, cancel: SignalEvent) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        seen.append((cancel.is_set(), cancel.signal_name))
        return 5

    monkeypatch.setattr(command, "_run", body)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert command.run(argparse.Namespace()) == 5
        assert seen == [(True, "SIGTERM")]
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # a late signal cannot turn it into 143
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_cancelled_demo_says_demo_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34: Ctrl-C on `kubetrain demo` said `kubetrain run: cancelled`."""
    cancel = SignalEvent()
    cancel.signal_name = "SIGINT"
    cancel.set()
    args = argparse.Namespace(runs_dir=tmp_path, json=False)
    assert demo_command._run(args, cancel) == ExitCode.CANCELLED
    out = capsys.readouterr().out
    assert "kubetrain demo: cancelled (SIGINT); before any step started" in out
    assert "kubetrain demo: cancelled; what ran so far is in" in out
    assert "kubetrain run" not in out
    # The run directory says how it ended, for `kubetrain list`.
    (run_dir,) = tmp_path.iterdir()
    assert json.loads((run_dir / "outcome.json").read_text())["state"] == "CANCELLED"
    assert not (run_dir / "kubetrain-run.json").exists()
