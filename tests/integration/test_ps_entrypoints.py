"""The PS processes' contracts: shard index from the JobSet env, health, exit codes on poison data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kubetrain.data.dataset_writer import write_dataset
from kubetrain.errors import ExitCode
from kubetrain.manifests.kinds import PS_FINAL_EXIT_CODE
from kubetrain.ps.common.rpc import make_channel, wait_serving
from kubetrain.ps.harness.localrun import LocalPSJob, free_port
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc
from kubetrain.ps.server.checkpoint import latest_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
HOST = "127.0.0.1"


def _server(tmp_path: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port(HOST)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubetrain.ps.server",
            "--port",
            str(port),
            "--num-shards",
            "3",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--job-token-file",
            str(tmp_path / "job-token"),
            *extra,
        ],
        env={**os.environ, "KUBETRAIN_BIND_ADDRESS": HOST, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return proc, f"{HOST}:{port}"


@pytest.mark.parametrize(
    ("env", "index"),
    [({"JOB_COMPLETION_INDEX": "2"}, 2), ({"KUBETRAIN_PS_INDEX": "1", "JOB_COMPLETION_INDEX": "2"}, 1)],
)
def test_shard_index_comes_from_the_jobset_env(tmp_path: Path, env: dict[str, str], index: int) -> None:
    proc, addr = _server(tmp_path, env)
    try:
        wait_serving(addr, deadline_s=60, service="kubetrain.ps.ParameterServer")
        with make_channel(addr, token=(tmp_path / "job-token").read_text()) as ch:
            stub = pb_grpc.ParameterServerStub(ch)
            state = stub.GetState(pb.GetStateRequest(), timeout=10)
            assert (state.shard_index, state.num_shards, state.generation) == (index, 3, 1)
            stub.Shutdown(pb.ShutdownRequest(reason="test"), timeout=10)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_a_server_stopped_by_sigterm_checkpoints_and_exits_cancelled_not_0(tmp_path: Path) -> None:
    # SIGTERM mid-job is its pod going (preempted, evicted): exit 0 would make the pod Succeeded
    # and its Job Complete, so the shard would never come back; a failure makes the Job start a
    # new pod, which resumes the checkpoint written on the way out.
    proc, addr = _server(tmp_path, {"KUBETRAIN_PS_INDEX": "0"})
    try:
        wait_serving(addr, deadline_s=60, service="kubetrain.ps.ParameterServer")
        with make_channel(addr, token=(tmp_path / "job-token").read_text()) as ch:
            stub = pb_grpc.ParameterServerStub(ch)
            weights = pb.Tensor(name="w", shape=[2], data=np.ones(2, np.float32).tobytes())
            assert stub.InitModel(pb.InitModelRequest(dense=[weights]), timeout=10).initialized
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == ExitCode.CANCELLED
    finally:
        proc.kill()
        proc.wait()
    assert latest_snapshot(tmp_path / "ckpt", 0, 3) is not None


def test_missing_shard_index_is_invalid_input(tmp_path: Path) -> None:
    env = dict.fromkeys(("KUBETRAIN_PS_INDEX", "JOB_COMPLETION_INDEX"), "")
    proc, _ = _server(tmp_path, env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INVALID_INPUT
    assert b"shard_index" in out


def _dataset(tmp_path: Path, *, poison: bool) -> Path:
    """200 training records in 2 shards; with `poison` the second shard is unreadable."""
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    write_dataset(
        data,
        name="poison",
        x_train=rng.normal(size=(200, 4)),
        y_train=rng.integers(0, 2, 200),
        x_test=rng.normal(size=(40, 4)),
        y_test=rng.integers(0, 2, 40),
        num_classes=2,
        shards=2,
        normalization={"mean": 0.0, "std": 1.0},
        source="test",
    )
    if poison:
        (data / "train-00001-of-00002.npz").write_bytes(b"not a shard")  # every task on it fails
    return data


POISON_MASTER_ARGS = ["--max-task-failures", "2", "--max-dropped-fraction", "0.1"]


def test_poison_shard_fails_the_job_after_the_drop_limit(tmp_path: Path) -> None:
    data = _dataset(tmp_path, poison=True)
    with LocalPSJob(
        workdir=tmp_path / "run",
        data=data,
        num_ps=1,
        num_workers=2,
        epochs=1,
        records_per_task=25,
        master_args=POISON_MASTER_ARGS,
        # The job fails within seconds: a worker still starting then finds the master gone and
        # reads the failure it recorded in the state dir, well before this retry deadline.
        worker_args=["--retry-deadline", "300"],
    ) as job:
        job.start_all()
        rcs = job.wait_all(deadline_s=120)
        metrics = json.loads((tmp_path / "run" / "output" / "metrics.json").read_text())
        master_log = job.tail("master", 0, lines=200)
    assert rcs["master-0"] == PS_FINAL_EXIT_CODE  # final: its Job fails at once (podFailurePolicy)
    assert rcs["ps-0"] == 0  # told to shut down
    # Told (or reading) that the job failed, a worker's part is over: the master's exit fails the job.
    assert all(rcs[f"worker-{i}"] == ExitCode.SUCCESS for i in range(2)), rcs
    assert metrics["status"] == "failed" and metrics["tasks_dropped"] >= 1
    assert "training records dropped" in metrics["failure_reason"]
    assert "is damaged" in master_log  # the poison shard is named as damaged


@pytest.mark.parametrize("poison", [True, False], ids=["failed", "done"])
def test_a_worker_started_after_the_master_exited_exits_with_the_recorded_outcome(tmp_path: Path, poison: bool) -> None:
    data = _dataset(tmp_path, poison=poison)
    with LocalPSJob(
        workdir=tmp_path / "run",
        data=data,
        num_ps=1,
        num_workers=1,
        epochs=1,
        records_per_task=25,
        master_args=POISON_MASTER_ARGS,
        worker_args=["--retry-deadline", "300"],
    ) as job:
        job.add_worker(0)
        job.start_all()
        expected = PS_FINAL_EXIT_CODE if poison else ExitCode.SUCCESS
        assert job.wait_exit("master", deadline_s=120) == expected, job.tail("master")
        job.wait_exit("ps", 0, deadline_s=60)
        # Nothing answers at the master's or the shard's address any more: only the outcome in
        # the state dir ($KUBETRAIN_PS_STATE_DIR) can end this worker before its 300 s deadline.
        job.add_worker(1)
        job.start("worker", 1)
        # 0 either way: the master's exit carries the failure (ps.common.errors.JobEndedError).
        assert job.wait_exit("worker", 1, deadline_s=90) == ExitCode.SUCCESS, job.tail("worker", 1)
        late_log = job.tail("worker", 1)
    assert "the master is gone and recorded that the job " + ("failed" if poison else "is done") in late_log
