"""Shared pieces of the training programs: flags, config validation, atomic files, the watchdog."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import IO

import pytest

from kubetrain.errors import ExitCode, SpecError
from kubetrain.train.common import (
    METRICS_JSON,
    TrainConfig,
    atomic_write,
    build_parser,
    final_metrics,
    write_metrics,
)

REQUIRED_METRICS = {
    "test_accuracy",
    "test_loss",
    "train_loss",
    "samples_per_second",
    "world_size",
    "wall_seconds",
    "epochs",
    "global_step",
    "history",
}


def _config(*extra: str) -> TrainConfig:
    parser = build_parser(prog="t", description="t")
    return TrainConfig.from_args(parser.parse_args(["--data", "d", "--output", "o", *extra]))


def test_design_flags_parse_into_the_config() -> None:
    cfg = _config(
        "--checkpoint-dir",
        "ck",
        "--epochs",
        "3",
        "--batch-size",
        "16",
        "--lr",
        "0.01",
        "--model",
        "cnn",
        "--seed",
        "7",
    )
    assert (cfg.data, cfg.output, cfg.checkpoint_dir) == (Path("d"), Path("o"), Path("ck"))
    assert (cfg.epochs, cfg.batch_size, cfg.lr, cfg.model, cfg.seed) == (3, 16, 0.01, "cnn", 7)


def test_no_checkpoint_dir_means_none() -> None:
    assert _config().checkpoint_dir is None


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--epochs", "0"), ("--batch-size", "-1"), ("--lr", "0"), ("--timeout-seconds", "0")],
)
def test_bad_numbers_name_the_flag(flag: str, value: str) -> None:
    with pytest.raises(SpecError) as info:
        _config(flag, value)
    assert info.value.field == flag


def test_unknown_model_is_rejected_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        _config("--model", "resnet")


def test_atomic_write_replaces_whole_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.bin"
    atomic_write(target, lambda f: f.write(b"old") and None)
    atomic_write(target, lambda f: f.write(b"new") and None)
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.bin"]


def test_atomic_write_failure_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")

    def broken(f: IO[bytes]) -> None:
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, broken)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_metrics_json_has_the_design_keys(tmp_path: Path) -> None:
    metrics = final_metrics(
        test_accuracy=0.9,
        test_loss=0.3,
        train_loss=0.2,
        samples_per_second=100.0,
        world_size=3,
        wall_seconds=1.5,
        epochs=2,
        global_step=30,
        history=[{"step": 10, "epoch": 0, "loss": 1.0}],
        extra={"framework": "x", "world_size": 99},
    )
    path = write_metrics(tmp_path, metrics)
    assert path == tmp_path / METRICS_JSON
    loaded = json.loads(path.read_text())
    assert set(loaded) >= REQUIRED_METRICS
    assert loaded["world_size"] == 3  # extras never override the required keys
    assert loaded["framework"] == "x"


def test_watchdog_ends_a_stalled_process_non_zero() -> None:
    # A real process: the watchdog must kill it although its main thread never returns.
    script = textwrap.dedent(
        """
        import threading
        from kubetrain.train.common import Watchdog
        Watchdog(limit_seconds=0.5, rank=0, what="test loop").start()
        threading.Event().wait()  # blocks forever
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert proc.returncode == int(ExitCode.JOB_FAILED)
    assert "watchdog: no progress in test loop" in proc.stderr


def test_watchdog_that_is_fed_does_not_fire() -> None:
    script = textwrap.dedent(
        """
        import time
        from kubetrain.train.common import Watchdog
        w = Watchdog(limit_seconds=0.5, rank=0, what="loop").start()
        for _ in range(20):
            w.beat()
            time.sleep(0.05)
        w.stop()
        print("finished")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "finished"


def test_a_rank_log_line_reaches_stderr_in_one_write() -> None:
    # The ranks run with PYTHONUNBUFFERED (the images and mpirun -x set it); mpirun relays every
    # rank's stderr into one stream, so a line written in two pieces let another rank's line in
    # between. A SEQPACKET socket as stderr keeps each write(2) a message of its own.
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    code = "from kubetrain.train.common import log; log(0, 'mpi: rank 0/2'); log(1, 'second')"
    with parent, child:
        subprocess.run(
            [sys.executable, "-c", code],
            stderr=child.fileno(),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            check=True,
            timeout=60,
        )
        child.close()
        writes = []
        while message := parent.recv(65536):
            writes.append(message)
    assert writes == [b"[rank 0] mpi: rank 0/2\n", b"[rank 1] second\n"]


def test_atomically_written_files_are_readable_by_the_next_steps_user(tmp_path: Path) -> None:
    # Found in real pods: mkstemp's 0600 left metrics.json and the model unreadable on a shared
    # claim to a next step running as another uid.
    from kubetrain.fileio import atomic_write_bytes

    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "metrics.json", b"{}")
    finally:
        os.umask(old)
    assert (tmp_path / "metrics.json").stat().st_mode & 0o777 == 0o644
