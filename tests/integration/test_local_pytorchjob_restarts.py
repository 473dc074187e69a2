"""PyTorchJob replicas restarted on the local backend with real processes: restart policies, back-off limits."""

from __future__ import annotations

import os
import signal

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.errors import JobFailedError
from kubetrain.launcher import AwaitOptions, run_job
from kubetrain.status import JobPhase
from tests.integration.local_jobs import CLAIM, _follow, _program, _pytorchjob, _template, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


KILLABLE_ALL_REDUCE = """
    import os, sys, time, pathlib
    import torch, torch.distributed as dist
    torch.set_num_threads(1)
    work = pathlib.Path(os.environ["WORK"])
    rank = int(os.environ["RANK"])
    marker = work / "killed-once"
    if rank == 2 and not marker.exists():
        # First life of worker-1: announce its pid and wait to be killed before joining.
        marker.write_text("")
        print("first life", flush=True)
        (work / "victim.pid").write_text(str(os.getpid()))
        time.sleep(600)
    print("joining", flush=True)
    dist.init_process_group("gloo")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    (work / f"sum-{rank}").write_text(str(t.item()))
    dist.barrier()
    dist.destroy_process_group()
"""


def test_sigkilled_worker_is_restarted_and_the_gloo_all_reduce_succeeds(backend: LocalBackend) -> None:
    program = _program(backend, "allreduce.py", KILLABLE_ALL_REDUCE)
    # env:// makes rank 0's store listen on every interface, at the default port 23456 here: the
    # local backend gives the job a port of its own, so other local jobs meanwhile do not meet it.
    template = _template(["python", program])
    ref = backend.submit(_pytorchjob("killjob", template, template, run_policy={"backoffLimit": 3}))
    pid_file = backend.claim_dir(CLAIM) / "victim.pid"
    _wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="the worker to write its pid")
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    status, phases = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert JobPhase.RESTARTING in phases
    assert phases.index(JobPhase.RESTARTING) < phases.index(JobPhase.SUCCEEDED)
    claim = backend.claim_dir(CLAIM)
    assert [float((claim / f"sum-{r}").read_text()) for r in range(3)] == [6.0, 6.0, 6.0]
    worker1 = next(p for p in backend.pods(ref) if p.name == "killjob-worker-1")
    assert worker1.restart_count == 1
    # Each container start has its own log: the killed one's is the previous log.
    previous = list(backend.pod_log(ref, worker1, follow=False, previous=True))
    current = list(backend.pod_log(ref, worker1, follow=False))
    assert "first life" in previous and "joining" not in previous
    assert "joining" in current and "first life" not in current


def test_exhausted_backoff_fails_with_the_exit_code(backend: LocalBackend) -> None:
    ok = _template(["python", "-c", "import time; time.sleep(600)"])
    bad = _template(["python", "-c", "import sys; print('bad input'); sys.exit(3)"])
    ref = backend.submit(_pytorchjob("backoff", ok, bad, workers=1, run_policy={"backoffLimit": 2}))
    status, phases = _follow(backend, ref)
    assert status.phase is JobPhase.FAILED
    assert status.reason == "PyTorchJobFailed"
    assert "reached the specified backoff limit" in status.message
    assert "backoff-worker-0 exited with code 3" in status.message
    assert JobPhase.RESTARTING in phases
    worker = next(p for p in backend.pods(ref) if p.name == "backoff-worker-0")
    assert worker.restart_count == 1  # limit 2: the operator fails the job when restarts reach it
    assert list(backend.pod_log(ref, worker, follow=False)) == ["bad input"]


@pytest.mark.parametrize(
    ("policy", "code", "expect_restart"),
    [("Never", 4, False), ("ExitCode", 3, False), ("ExitCode", 137, True), ("OnFailure", 1, True)],
)
def test_restart_policies(backend: LocalBackend, policy: str, code: int, expect_restart: bool) -> None:
    # The worker fails once with `code` (137: killed by SIGKILL), then succeeds if it is restarted.
    source = f"""
        import os, signal, sys, pathlib
        flag = pathlib.Path(os.environ["WORK"]) / "failed-once"
        if not flag.exists():
            flag.write_text("")
            if {code} == 137:
                os.kill(os.getpid(), signal.SIGKILL)
            sys.exit({code})
    """
    program = _program(backend, "once.py", source)
    master = _template(
        ["python", "-c", "import pathlib, time\nwhile not pathlib.Path('/workspace/done').exists(): time.sleep(0.05)"]
    )
    worker = _template(["sh", "-c", f"python {program} && touch /workspace/done"])
    ref = backend.submit(_pytorchjob(f"policy-{policy.lower()}-{code}", master, worker, workers=1, policy=policy))
    status, phases = _follow(backend, ref)
    if expect_restart:
        assert status.phase is JobPhase.SUCCEEDED, status.message
        assert JobPhase.RESTARTING in phases
    else:
        assert status.phase is JobPhase.FAILED
        assert status.message.startswith(f"PyTorchJob {ref.name} is failed because 1 Worker replica(s) failed.")
        assert f"exited with code {code}" in status.message
        assert JobPhase.RESTARTING not in phases


def test_always_restarts_even_after_success_until_the_backoff_limit(backend: LocalBackend) -> None:
    ref = backend.submit(
        _pytorchjob(
            "always", _template(["python", "-c", "pass"]), None, policy="Always", run_policy={"backoffLimit": 2}
        )
    )
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.FAILED
    assert "always-master-0 exited with code 0" in status.message


def test_a_program_file_that_is_not_there_fails_once_and_names_it(backend: LocalBackend) -> None:
    """Issue 49 item 7: a missing program exited 1 after 4 starts, `can't open file` only in the log tails."""
    template = _template(["python", "-u", "/workspace/trian.py", "--epochs", "2"])
    manifest = _pytorchjob("nofile", template, None, run_policy={"backoffLimit": 3})
    lines: list[str] = []
    with pytest.raises(JobFailedError) as failed:
        run_job(manifest, backend=backend, options=AwaitOptions(timeout_seconds=60), log_sink=lines.append)
    here = backend.claim_dir(CLAIM) / "trian.py"
    said = f"python: can't open file '/workspace/trian.py' (on this machine {here}): no such file"
    assert said in failed.value.headline() and "\n" not in failed.value.headline()
    assert not any("Restarting" in line or "restart" in line for line in lines), lines
