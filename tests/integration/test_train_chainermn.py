"""ChainerMN program with real processes: plain, and under `mpiexec -n 3` (Open MPI)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kubetrain.data.dataset_format import load_split
from kubetrain.data.download import download

pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.timeout(300)]

PROGRAM = "kubetrain.train.chainermn_mpi"
MPIEXEC = shutil.which("mpiexec")
MPI_FLAGS = ["--allow-run-as-root", "--oversubscribe"]

if MPIEXEC is None:  # the project installs Open MPI in `make setup`; without it this is broken
    pytest.fail("mpiexec not found: install openmpi-bin (make setup)", pytrace=False)


def _wait_for(pred: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclass
class Job:
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"still running after {timeout}s:\n{self.tail()}") from e

    def ranks(self, n: int) -> dict[int, int]:
        """pid of each MPI rank (mpiexec's children, told apart by OMPI_COMM_WORLD_RANK)."""
        found: dict[int, int] = {}

        def all_started() -> bool:
            pid = self.popen.pid
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            for child in children:
                try:
                    env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                except FileNotFoundError:
                    continue
                for var in env:
                    if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                        found[int(var.split(b"=")[1])] = int(child)
            return len(found) == n

        _wait_for(all_started, timeout=60, what=f"{n} MPI ranks")
        return found


class Launcher:
    """Starts jobs in their own session and kills whatever is left at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.jobs: list[Job] = []

    def start(self, argv: list[str], name: str, env: dict[str, str] | None = None) -> Job:
        log = self.tmp / f"{name}-{len(self.jobs)}.log"
        with open(log, "wb") as f:
            popen = subprocess.Popen(
                argv,
                env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        job = Job(popen, log)
        self.jobs.append(job)
        return job

    def mpi(self, n: int, args: list[str], name: str) -> Job:
        cmd = [str(MPIEXEC), "-n", str(n), *MPI_FLAGS, sys.executable, "-m", PROGRAM, *args]
        return self.start(cmd, name)

    def plain(self, args: list[str], name: str) -> Job:
        return self.start([sys.executable, "-m", PROGRAM, *args], name)

    def cleanup(self) -> None:
        for job in self.jobs:
            if job.popen.poll() is None:
                os.killpg(job.popen.pid, signal.SIGKILL)
                job.popen.wait()


def _metrics(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "metrics.json").read_text()))


def _succeed(job: Job, timeout: float = 240) -> None:
    code = job.wait(timeout)
    assert code == 0, job.tail()


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digits")
    download("builtin:digits", out)
    return out


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path_factory.mktemp("mpi-logs"))
    yield launcher
    launcher.cleanup()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.cleanup()


@pytest.fixture(scope="module")
def clean_mpi_run(digits: Path, module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Defaults under mpiexec -n 3, uninterrupted."""
    out = tmp_path_factory.mktemp("mpi-clean")
    _succeed(module_launcher.mpi(3, ["--data", str(digits), "--output", str(out)], "clean"))
    return {"out": out, "metrics": _metrics(out)}


def _accuracy_of_saved_model(model_file: Path, digits: Path) -> float:
    from kubetrain.train.chainer_models import load_model_file

    model, _ = load_model_file(model_file)
    x, y = load_split(digits, "test")
    return float(np.mean(model(x).array.argmax(axis=1) == y))


def test_mpi_and_plain_runs_reach_the_acceptance_accuracy(
    digits: Path, clean_mpi_run: dict[str, Any], launcher: Launcher, tmp_path: Path
) -> None:
    dist = clean_mpi_run["metrics"]
    single_out = tmp_path / "single"
    job = launcher.plain(["--data", str(digits), "--output", str(single_out)], "plain")
    _succeed(job)
    single = _metrics(single_out)

    assert (dist["world_size"], dist["launcher"]) == (3, "mpi")
    assert dist["communicator"] == "NaiveCommunicator"
    assert (single["world_size"], single["launcher"]) == (1, "single")
    assert dist["test_accuracy"] >= 0.95
    assert single["test_accuracy"] >= 0.95
    assert abs(dist["test_accuracy"] - single["test_accuracy"]) <= 0.01
    for m in (dist, single):
        assert m["epochs"] == 12
        assert m["history"][-1]["step"] == m["global_step"]
    saved = _accuracy_of_saved_model(clean_mpi_run["out"] / "model.npz", digits)
    assert saved == pytest.approx(dist["test_accuracy"])


def test_plain_run_needs_no_mpi4py(digits: Path, launcher: Launcher, tmp_path: Path) -> None:
    # Block mpi4py and chainermn: without an MPI launcher the program must not import them.
    blocker = tmp_path / "block"
    blocker.mkdir()
    for mod in ("mpi4py", "chainermn"):
        (blocker / mod).mkdir()
        (blocker / mod / "__init__.py").write_text(f"raise ImportError('{mod} blocked')\n")
    out = tmp_path / "out"
    job = launcher.start(
        [sys.executable, "-m", PROGRAM, "--data", str(digits), "--output", str(out), "--epochs", "1"],
        "nompi",
        env={"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])},
    )
    _succeed(job)
    assert _metrics(out)["world_size"] == 1


def test_resume_after_sigkill_of_one_rank(
    digits: Path, clean_mpi_run: dict[str, Any], launcher: Launcher, tmp_path: Path
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    args = ["--data", str(digits), "--output", str(out), "--checkpoint-dir", str(ckpt)]
    args += ["--checkpoint-every", "10"]
    first = launcher.mpi(3, args, "first")
    ranks = first.ranks(3)

    def step_reached() -> bool:
        steps = [int(p.name[5:15]) for p in ckpt.glob("ckpt-*.npz")]
        return bool(steps) and max(steps) >= 60

    _wait_for(step_reached, timeout=180, what="a checkpoint at step >= 60")
    # Freeze every rank so rank 1 dies mid-run at a known point, then let mpiexec notice.
    for pid in ranks.values():
        os.kill(pid, signal.SIGSTOP)
    os.kill(ranks[1], signal.SIGKILL)
    for pid in ranks.values():
        os.kill(pid, signal.SIGCONT)
    assert first.wait(60) != 0
    assert not (out / "metrics.json").exists()
    newest = max(int(p.name[5:15]) for p in ckpt.glob("ckpt-*.npz"))

    second = launcher.mpi(3, args, "second")
    _succeed(second)
    resumed = _metrics(out)
    clean = clean_mpi_run["metrics"]
    assert resumed["resumed_from_step"] == newest >= 60
    assert resumed["global_step"] == clean["global_step"]
    assert resumed["samples_trained"] < clean["samples_trained"]
    assert abs(resumed["test_accuracy"] - clean["test_accuracy"]) <= 0.01
    steps = [h["step"] for h in resumed["history"] if h["kind"] == "step"]
    assert steps == sorted(set(steps))


def test_failure_on_rank0_mid_training_aborts_the_job(digits: Path, launcher: Launcher, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "ckpt-0000000020.npz").mkdir(parents=True)  # rank 0 cannot write step 20
    args = ["--data", str(digits), "--output", str(tmp_path / "out"), "--epochs", "3"]
    args += ["--checkpoint-dir", str(ckpt), "--checkpoint-every", "10"]
    job = launcher.mpi(3, args, "fail")
    assert job.wait(120) != 0
    log = job.tail()
    assert "cannot write checkpoint" in log
    assert "[rank 0] calling MPI_Abort(1)" in log


def test_hung_rank_trips_the_watchdog_and_ends_the_job(digits: Path, launcher: Launcher, tmp_path: Path) -> None:
    args = ["--data", str(digits), "--output", str(tmp_path / "out"), "--epochs", "2000"]
    args += ["--timeout-seconds", "3"]
    job = launcher.mpi(3, args, "hung")
    ranks = job.ranks(3)
    _wait_for(lambda: "epoch 1:" in job.tail(), timeout=180, what="training to run")
    os.kill(ranks[2], signal.SIGSTOP)
    assert job.wait(120) != 0
    assert "watchdog: no progress" in job.tail()


def test_uncaught_exception_on_one_rank_aborts_all(launcher: Launcher, tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            from kubetrain.train.mpi_group import open_group
            from kubetrain.train.topology import mpi_world_from_env
            group = open_group(mpi_world_from_env(os.environ), communicator="naive", gpu=False)
            if group.rank == 1:
                raise ValueError("boom on rank 1")
            group.allreduce_sum([1.0])  # rank 0 would wait here forever without MPI_Abort
            print("unreachable")
            """
        )
    )
    job = launcher.start([str(MPIEXEC), "-n", "2", *MPI_FLAGS, sys.executable, str(script)], "boom")
    assert job.wait(120) != 0
    log = job.tail()
    assert "boom on rank 1" in log
    assert "Calling MPI_Abort()" in log  # ChainerMN's hook, installed by open_group
    assert "unreachable" not in log
