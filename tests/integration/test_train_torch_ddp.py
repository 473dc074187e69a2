"""PyTorch DDP program with real processes: gloo on 127.0.0.1, the operator's env, torchrun.

Every group is started the way the training-operator starts a PyTorchJob's replicas: one process
per replica with MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK (and the PET_* variables) in its env.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kubetrain.backends.base import PodInfo
from kubetrain.data.dataset_format import load_split
from kubetrain.data.download import download
from kubetrain.launcher.program_error import program_error
from kubetrain.train.topology import pytorchjob_env

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROGRAM = "kubetrain.train.torch_ddp"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(pred: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]


class Launcher:
    """Starts training processes and guarantees none outlives the test."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []

    def start(self, argv: list[str], env: dict[str, str], name: str) -> Proc:
        log = self.tmp / f"{name}-{len(self.procs)}.log"
        with open(log, "wb") as f:
            popen = subprocess.Popen(
                argv,
                env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(popen, log)
        self.procs.append(proc)
        return proc

    def group(self, n: int, args: list[str], *, port: int, name: str) -> list[Proc]:
        """n replicas: rank 0 as the Master, ranks 1.. as Workers 0.., as the operator does."""
        return [
            self.start(
                [sys.executable, "-m", PROGRAM, *args],
                pytorchjob_env(
                    replica_index=0 if rank == 0 else rank - 1,
                    is_master=rank == 0,
                    replicas=n,
                    master_addr="127.0.0.1",
                    master_port=port,
                ),
                f"{name}-rank{rank}",
            )
            for rank in range(n)
        ]

    def cleanup(self) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait()


def _wait_all(procs: list[Proc], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.popen.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired as e:
            logs = "\n".join(q.tail() for q in procs)
            raise AssertionError(f"{p.log.name} still running after {timeout}s:\n{logs}") from e
    return codes


def _succeed(procs: list[Proc], timeout: float = 240) -> None:
    codes = _wait_all(procs, timeout)
    assert codes == [0] * len(procs), "\n".join(p.tail() for p in procs)


def _metrics(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "metrics.json").read_text()))


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digits")
    download("builtin:digits", out)
    return out


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path_factory.mktemp("ddp-logs"))
    yield launcher
    launcher.cleanup()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.cleanup()


@pytest.fixture(scope="module")
def clean_three_rank_run(
    digits: Path, module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Defaults, 3 ranks, uninterrupted: the acceptance run and the resume test's reference."""
    out = tmp_path_factory.mktemp("ddp-clean")
    procs = module_launcher.group(3, ["--data", str(digits), "--output", str(out)], port=_free_port(), name="clean")
    _succeed(procs)
    return {"out": out, "metrics": _metrics(out)}


def _accuracy_of_saved_model(model_file: Path, digits: Path) -> float:
    from kubetrain.train.torch_models import load_model_file

    model, _ = load_model_file(model_file)
    x, y = load_split(digits, "test")
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float(np.mean(pred == y))


def test_three_ranks_and_one_process_reach_the_acceptance_accuracy(
    digits: Path, clean_three_rank_run: dict[str, Any], launcher: Launcher, tmp_path: Path
) -> None:
    dist = clean_three_rank_run["metrics"]
    single_out = tmp_path / "single"
    argv = [sys.executable, "-m", PROGRAM, "--data", str(digits), "--output", str(single_out)]
    _succeed([launcher.start(argv, {}, "single")])
    single = _metrics(single_out)

    assert dist["world_size"] == 3
    assert dist["launcher"] == "operator"
    assert single["world_size"] == 1
    assert single["launcher"] == "single"
    assert dist["test_accuracy"] >= 0.95
    assert single["test_accuracy"] >= 0.95
    assert abs(dist["test_accuracy"] - single["test_accuracy"]) <= 0.01
    for m in (dist, single):
        assert m["epochs"] == 12
        assert m["samples_per_second"] > 0
        assert m["history"][-1]["step"] == m["global_step"]
        assert "test_accuracy" in m["history"][-1]
    # model.pt is the trained model: scoring it again gives the reported accuracy.
    saved = _accuracy_of_saved_model(clean_three_rank_run["out"] / "model.pt", digits)
    assert saved == pytest.approx(dist["test_accuracy"])


def test_runs_under_torchrun(digits: Path, launcher: Launcher, tmp_path: Path) -> None:
    out = tmp_path / "out"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    torchrun += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    program = ["-m", PROGRAM, "--data", str(digits), "--output", str(out), "--epochs", "1"]
    proc = launcher.start([*torchrun, *program], {}, "torchrun")
    _succeed([proc])
    m = _metrics(out)
    assert (m["world_size"], m["launcher"], m["epochs"]) == (2, "torchrun", 1)


def _freeze_kill_thaw(procs: list[Proc], victim: int) -> None:
    # Stop the whole group first, so the victim dies mid-run at a known point, not after the end.
    for p in procs:
        os.kill(p.popen.pid, signal.SIGSTOP)
    os.kill(procs[victim].popen.pid, signal.SIGKILL)
    for p in procs:
        os.kill(p.popen.pid, signal.SIGCONT)


def test_resume_after_sigkill_of_one_rank(
    digits: Path, clean_three_rank_run: dict[str, Any], launcher: Launcher, tmp_path: Path
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    args = ["--data", str(digits), "--output", str(out), "--checkpoint-dir", str(ckpt)]
    args += ["--checkpoint-every", "10", "--timeout-seconds", "20"]
    port = _free_port()
    first = launcher.group(3, args, port=port, name="first")

    def step_reached() -> bool:
        steps = [int(p.name[5:15]) for p in ckpt.glob("ckpt-*.pt")]
        return bool(steps) and max(steps) >= 60

    _wait_for(step_reached, timeout=180, what="a checkpoint at step >= 60")
    _freeze_kill_thaw(first, victim=1)
    codes = _wait_all(first, timeout=60)
    assert codes[1] == -signal.SIGKILL
    assert codes[0] != 0, first[0].tail()  # survivors notice the dead peer and fail
    assert codes[2] != 0, first[2].tail()
    assert not (out / "metrics.json").exists()
    newest = max(int(p.name[5:15]) for p in ckpt.glob("ckpt-*.pt"))

    # The operator restarts the replicas with the same environment (same port).
    second = launcher.group(3, args, port=port, name="second")
    _succeed(second)
    resumed = _metrics(out)
    clean = clean_three_rank_run["metrics"]
    assert resumed["resumed_from_step"] == newest >= 60
    assert resumed["global_step"] == clean["global_step"]  # continued, not restarted
    assert resumed["samples_trained"] < clean["samples_trained"]
    assert abs(resumed["test_accuracy"] - clean["test_accuracy"]) <= 0.01
    steps = [h["step"] for h in resumed["history"] if h["kind"] == "step"]
    assert steps == sorted(set(steps))  # one history, no step logged twice or restarted
    assert "resumed from" in second[0].tail()


def test_hung_peer_makes_the_survivors_exit_non_zero(digits: Path, launcher: Launcher, tmp_path: Path) -> None:
    timeout = 5
    args = ["--data", str(digits), "--output", str(tmp_path / "out"), "--epochs", "500"]
    args += ["--timeout-seconds", str(timeout)]
    procs = launcher.group(3, args, port=_free_port(), name="hung")
    _wait_for(lambda: "epoch 1:" in procs[0].tail(), timeout=180, what="training to run")
    os.kill(procs[2].popen.pid, signal.SIGSTOP)  # alive, connections open, never answers
    # The bound under test: the collective timeout plus the watchdog's grace, never a hang.
    codes = _wait_all(procs[:2], timeout=timeout + 30 + 30)
    assert all(c != 0 for c in codes), codes
    assert "Timed out" in procs[0].tail() + procs[1].tail()


def test_rank0_failure_mid_training_fails_the_group(digits: Path, launcher: Launcher, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "ckpt-0000000020.pt").mkdir(parents=True)  # rank 0 cannot write step 20
    args = ["--data", str(digits), "--output", str(tmp_path / "out"), "--epochs", "3"]
    args += ["--checkpoint-dir", str(ckpt), "--checkpoint-every", "10", "--timeout-seconds", "20"]
    # Two ranks: the worker, healthy itself, must still fail with its master (a third rank added a
    # torch process to the unit tier, not a case; issue 44).
    procs = launcher.group(2, args, port=_free_port(), name="fail")
    codes = _wait_all(procs, timeout=120)
    assert all(c != 0 for c in codes), codes
    assert "cannot write checkpoint" in procs[0].tail()
    assert not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.parametrize("present_rank", [0, 1])
def test_missing_peer_fails_rendezvous_within_the_init_timeout(
    digits: Path, launcher: Launcher, tmp_path: Path, present_rank: int
) -> None:
    env = pytorchjob_env(
        replica_index=0 if present_rank == 0 else present_rank - 1,
        is_master=present_rank == 0,
        replicas=2,
        master_addr="127.0.0.1",
        master_port=_free_port(),
    )
    args = ["--data", str(digits), "--output", str(tmp_path / "out"), "--init-timeout-seconds", "3"]
    proc = launcher.start([sys.executable, "-m", PROGRAM, *args], env, "alone")
    (code,) = _wait_all([proc], timeout=120)
    assert code != 0
    assert "rendezvous" in proc.tail()


def test_a_diverged_run_fails_every_rank_with_one_line_naming_the_loss(
    digits: Path, launcher: Launcher, tmp_path: Path
) -> None:
    """Issue 48 item 6: with learning_rate=1e20 the job ended SUCCEEDED at chance accuracy, losses dropped."""
    args = ["--data", str(digits), "--output", str(tmp_path / "out"), "--epochs", "2", "--lr", "1e20"]
    procs = launcher.group(2, args, port=_free_port(), name="diverge")
    assert _wait_all(procs, timeout=120) == [1, 1]
    assert not (tmp_path / "out" / "metrics.json").exists()
    # What the launcher makes of the failed pods' logs (either backend): the divergence, rank 0's.
    master = PodInfo(name="j-master-0", replica_type="Master", index=0, phase="Failed", container="pytorch")
    worker = PodInfo(name="j-worker-0", replica_type="Worker", index=0, phase="Failed", container="pytorch")
    said = program_error([(worker, procs[1].tail()), (master, procs[0].tail())], kind="PyTorchJob")
    assert said is not None and said.startswith("rank 0: DivergedError: the model diverged at step "), said
    assert said.endswith(": the training loss (averaged over the ranks) is nan; lower the learning rate "
                         "(or check the data for non-finite values)"), said  # fmt: skip
