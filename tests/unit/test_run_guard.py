"""`kubetrain run`'s guard: a stop signal that came before it starts no step, and it hands the signals back."""

from __future__ import annotations

import signal

import pytest

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
