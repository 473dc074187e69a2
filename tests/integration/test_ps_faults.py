"""PS runs on builtin digits (1 master, 2 PS, 3 workers on 127.x addresses) through failures.

Each run is audited from the workers' trained-batch logs: every training record of every epoch
must have been trained at least once by a batch whose update survived (a batch whose gradients
landed past the checkpoint a restarted shard came back from does not count), and the number of
records trained twice is reported. Each faulty run must end within 1 point of the clean run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kubetrain.data.download import download
from kubetrain.ps.harness.localrun import LocalPSJob, wait_until

# Only a bound for a hung run: the clean run (a module fixture) is charged to the first test that
# uses it, and each test's own waits add up to 600 s; on a busy machine one job takes minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EPOCHS = 10


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ps-data") / "digits"
    download("builtin:digits", out, shards=2, quiet=True)
    return out


def _job(workdir: Path, data: Path, **kw: Any) -> LocalPSJob:
    return LocalPSJob(
        workdir=workdir,
        data=data,
        num_ps=2,
        num_workers=3,
        mode="async",
        epochs=EPOCHS,
        records_per_task=64,
        master_args=["--heartbeat-timeout", "3", "--heartbeat-interval", "0.5", "--batch-size", "32"],
        ps_args=["--optimizer", "adam", "--lr", "0.004", "--lr-half-life", "100", "--checkpoint-every", "20"],
        **kw,
    )


def _report(name: str, job: LocalPSJob, rcs: dict[str, int]) -> dict[str, Any]:
    m = job.metrics()
    a = job.audit()
    summary = {
        "run": name,
        "exit_codes": rcs,
        "test_accuracy": m["test_accuracy"],
        "audit": a.to_json(),
        **{
            k: m[k]
            for k in (
                "records_trained_twice",
                "tasks_failed",
                "tasks_retrained_after_ps_restore",
                "workers_lost",
                "master_generation",
                "ps_generations",
                "records_untrained",
            )
        },
    }
    print(json.dumps(summary))  # shown with -s / in the bench notes
    assert a.complete, f"untrained records, e.g. (epoch, shard, index) {a.untrained_examples}"
    assert m["records_untrained"] == 0 and m["status"] == "succeeded"
    return summary


@pytest.fixture(scope="module")
def clean(digits: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with _job(tmp_path_factory.mktemp("ps-clean"), digits) as job:
        job.start_all()
        rcs = job.wait_all(deadline_s=240)
        return _report("clean", job, rcs)


def test_clean_async_run_reaches_095_and_trains_every_record_once(clean: dict[str, Any]) -> None:
    assert all(rc == 0 for rc in clean["exit_codes"].values()), clean["exit_codes"]
    assert clean["test_accuracy"] >= 0.95
    assert clean["audit"]["extra_trainings"] == 0


def _last_line(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    lines = path.read_text().splitlines()
    return json.loads(lines[-1]) if lines and lines[-1].endswith("}") else None


def test_worker_killed_mid_task(digits: Path, tmp_path: Path, clean: dict[str, Any]) -> None:
    with _job(tmp_path, digits) as job:
        # Workers 0 and 2 are held at the gate, heartbeating, until the replacement has been handed
        # a task: the work it must find is still queued however slowly its process starts.
        job.add_worker(0, gated=True)
        job.add_worker(1, ["--slowdown", "10"])  # slow enough to be caught between two batches
        job.add_worker(2, gated=True)
        job.hold(0, 2)
        job.start_all()
        log = tmp_path / "trained" / "worker-1.jsonl"
        joined_log = tmp_path / "trained" / "worker-3.jsonl"

        def mid_task() -> bool:
            last = _last_line(log)
            # The first batch of a 2-batch task is pushed: the worker is inside the task.
            return last is not None and last["task"].endswith(f"/{last['start']}-{last['start'] + 64}")

        wait_until(mid_task, deadline_s=120, what="worker-1 inside a task", every_s=0.01)
        job.kill("worker", 1)
        job.add_worker(3, gated=True)  # a replacement joins the running job
        job.start("worker", 3)
        wait_until(lambda: job.tasks_given(3) > 0, deadline_s=120, what="worker-3 handed a task")
        job.release(0, 2)
        rcs = job.wait_all(deadline_s=240)
        summary = _report("worker killed", job, rcs)
        joined = joined_log.read_text().splitlines()
    assert rcs["worker-1"] == -9 and all(rc == 0 for k, rc in rcs.items() if k != "worker-1")
    assert joined, "the worker that joined late trained nothing"
    assert summary["workers_lost"] == 1 and summary["tasks_failed"] >= 1
    assert summary["audit"]["records_trained_twice"] >= 32  # the killed task's first batch, again
    assert abs(summary["test_accuracy"] - clean["test_accuracy"]) <= 0.01


def test_ps_killed_and_restarted(digits: Path, tmp_path: Path, clean: dict[str, Any]) -> None:
    with _job(tmp_path, digits) as job:
        job.start_all()
        wait_until(lambda: job.trained_lines() >= 150, deadline_s=120, what="150 batches", every_s=0.01)
        job.kill("ps", 1)
        time.sleep(0.3)  # the shard is down while workers push: they must retry, not fail
        job.start("ps", 1)
        rcs = job.wait_all(deadline_s=240)
        summary = _report("ps killed", job, rcs)
    assert all(rc == 0 for rc in rcs.values()), rcs
    assert summary["ps_generations"]["1"] == 2
    if summary["audit"]["lost_batches"]:  # updates past the checkpoint were lost: tasks re-done
        assert summary["tasks_retrained_after_ps_restore"] >= 1
    assert abs(summary["test_accuracy"] - clean["test_accuracy"]) <= 0.01


def test_master_killed_and_restarted(digits: Path, tmp_path: Path, clean: dict[str, Any]) -> None:
    with _job(tmp_path, digits) as job:
        job.start_all()
        wait_until(lambda: job.trained_lines() >= 150, deadline_s=120, what="150 batches", every_s=0.01)
        job.kill("master")
        time.sleep(0.3)
        job.start("master")
        job.wait_serving("master")
        rcs = job.wait_all(deadline_s=240)
        summary = _report("master killed", job, rcs)
    assert all(rc == 0 for rc in rcs.values()), rcs
    assert summary["master_generation"] == 2
    assert abs(summary["test_accuracy"] - clean["test_accuracy"]) <= 0.01
