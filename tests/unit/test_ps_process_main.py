"""The PS processes' one `main()`: flags parsed, logging set up, a KubetrainError ending the process with its code."""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetrain.errors import ExitCode
from kubetrain.ps.common.errors import PSUnavailableError
from kubetrain.ps.common.procs import process_main
from kubetrain.ps.server.main import main as server_main


@pytest.fixture
def signal_handlers() -> Iterator[None]:
    """The worker installs SIGTERM/SIGINT handlers as a process would: give pytest its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_an_error_ends_the_process_with_its_exit_code_logged_as_the_last_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log-level", default="INFO")
    log = logging.getLogger("kubetrain.ps.test")

    def unreachable(args: argparse.Namespace) -> int:
        raise PSUnavailableError("master at m:1 unreachable")

    assert process_main("ps", parser, unreachable, [], log=log) == ExitCode.JOB_FAILED
    last = caplog.records[-1]
    assert (last.name, last.levelno, last.getMessage()) == (
        "kubetrain.ps.test",
        logging.ERROR,
        "master at m:1 unreachable",
    )
    assert process_main("ps", parser, lambda args: 0, [], log=log) == 0


def test_a_server_whose_flags_can_never_work_exits_invalid_input(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flags = ["--port", "0", "--num-shards", "1", "--shard-index", "0", "--checkpoint-dir", str(tmp_path / "ck"),
             "--job-token-file", str(tmp_path / "token"), "--checkpoint-every", "0"]  # fmt: skip
    assert server_main(flags) == ExitCode.INVALID_INPUT
    last = caplog.records[-1]
    assert (last.name, last.getMessage()) == ("kubetrain.ps.server", "--checkpoint-every: got 0; expected >= 1")


@pytest.mark.usefixtures("signal_handlers")
def test_a_worker_whose_flags_can_never_work_exits_invalid_input(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from kubetrain.ps.worker.main import main as worker_main  # imports torch

    flags = ["--master", "master-without-port", "--ps-addrs", "ps-0:2222", "--data", str(tmp_path),
             "--job-token-file", str(tmp_path / "token")]  # fmt: skip
    assert worker_main(flags) == ExitCode.INVALID_INPUT
    last = caplog.records[-1]
    assert last.name == "kubetrain.ps.worker"
    assert last.getMessage().startswith("--master: got 'master-without-port'; expected host:port")
