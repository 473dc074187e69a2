"""A PyTorchJob's life on the local backend with real processes: active deadline, suspend and resume,
delete, and deletion after ttlSecondsAfterFinished.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.errors import BackendError
from kubetrain.status import JobPhase, parse_job_status
from tests.integration.local_jobs import CLAIM, _follow, _pids_of, _program, _pytorchjob, _template, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_active_deadline_fails_the_job_and_stops_its_replicas(backend: LocalBackend) -> None:
    sleeper = _template(["python", "-c", "import time; time.sleep(600)"])
    started = time.monotonic()
    ref = backend.submit(_pytorchjob("deadline", sleeper, sleeper, workers=1, run_policy={"activeDeadlineSeconds": 2}))
    # The replicas would run for 600 s: a job that ends within this bound was ended by its deadline.
    status, _ = _follow(backend, ref, timeout=120)
    elapsed = time.monotonic() - started
    assert status.phase is JobPhase.FAILED
    assert status.reason == "DeadlineExceeded"
    assert "active longer than specified deadline" in status.message
    assert elapsed >= 2.0  # not before the deadline (a busy machine can only make it later)
    assert all(p.phase == "Failed" for p in backend.pods(ref))  # its processes were stopped


def test_suspend_stops_the_processes_and_resume_starts_them_again(backend: LocalBackend) -> None:
    program = _program(
        backend,
        "gate.py",
        """
        import os, pathlib, time
        work = pathlib.Path(os.environ["WORK"])
        (work / f"pid-{os.environ['HOSTNAME']}-{os.getpid()}").write_text("")
        while not (work / "gate").exists():
            time.sleep(0.05)
        """,
    )
    ref = backend.submit(_pytorchjob("susp", _template(["python", program]), None))
    claim = backend.claim_dir(CLAIM)
    _wait_for(lambda: list(claim.glob("pid-susp-master-0-*")), what="the first start")
    first_pid = int(next(claim.glob("pid-susp-master-0-*")).name.rsplit("-", 1)[1])
    backend.suspend(ref)
    _wait_for(lambda: parse_job_status(backend.get(ref)).phase is JobPhase.SUSPENDED, what="Suspended")
    _wait_for(lambda: not Path(f"/proc/{first_pid}").exists(), what="the suspended process to go")
    assert backend.pods(ref) == []
    backend.resume(ref)
    _wait_for(lambda: len(list(claim.glob("pid-susp-master-0-*"))) == 2, what="the second start")
    (claim / "gate").touch()
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED
    suspended = next(c for c in status.conditions if c.type == "Suspended")
    assert (suspended.status, suspended.reason) == ("False", "PyTorchJobResumed")


def test_delete_kills_every_replica_and_forgets_the_job(backend: LocalBackend, tmp_path: Path) -> None:
    program = _program(backend, "forever.py", "import time\ntime.sleep(600)\n")
    template = _template(["python", program])
    ref = backend.submit(_pytorchjob("gone", template, template))
    _wait_for(lambda: len(_pids_of(tmp_path)) == 3, what="three replicas")
    backend.delete(ref)
    assert _pids_of(tmp_path) == []
    with pytest.raises(BackendError, match="does not exist"):
        backend.get(ref)
    backend.delete(ref)  # deleting what is gone is fine


def test_ttl_after_finished_deletes_the_finished_job(backend: LocalBackend) -> None:
    ref = backend.submit(
        _pytorchjob("ttl", _template(["python", "-c", "pass"]), None, run_policy={"ttlSecondsAfterFinished": 1})
    )
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED
    assert backend.pods(ref)  # still there right after it finished

    def gone() -> bool:
        try:
            backend.get(ref)
        except BackendError:
            return True
        return False

    _wait_for(gone, timeout=30, what="the TTL to delete the job")
