"""PyTorchJobs on the local backend with real processes: env, restarts, back-off, deadline, suspend, delete."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.base import JobRef
from kubetrain.backends.local.backend import LocalBackend
from kubetrain.backends.local.env import MACHINE_ENV, image_environment
from kubetrain.errors import BackendError, JobConflictError
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from kubetrain.status import JobPhase, JobStatus, parse_job_status

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CLAIM = "work"


def _pids_of(root: Path) -> list[int]:
    """Live processes whose command line mentions `root` (every replica here runs a file under it)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(root) in cmdline and state != "Z":
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie waiting to be reaped is dead."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """A backend under tmp_path; after the test no process of it may survive."""
    b = LocalBackend(tmp_path / "root", restart_backoff_seconds=0.2, max_grace_seconds=2.0)
    yield b
    b.close()
    assert _pids_of(tmp_path) == []


def _program(backend: LocalBackend, name: str, source: str) -> str:
    (backend.claim_dir(CLAIM) / name).write_text(textwrap.dedent(source))
    return f"/workspace/{name}"


def _template(command: list[str], *, env: list[dict[str, Any]] | None = None, **container: Any) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "registry.example/train:1",
                    "command": command,
                    # Paths inside a program's source are not translated (only env and args are):
                    # programs find the claim through $WORK.
                    "env": [
                        {"name": "OMP_NUM_THREADS", "value": "1"},
                        {"name": "WORK", "value": "/workspace"},
                        *(env or []),
                    ],
                    "volumeMounts": [
                        {"name": "work", "mountPath": "/workspace"},
                        {"name": "scratch", "mountPath": "/scratch"},
                    ],
                    **container,
                }
            ],
            "volumes": [
                {"name": "work", "persistentVolumeClaim": {"claimName": CLAIM}},
                {"name": "scratch", "emptyDir": {}},
            ],
        }
    }


def _pytorchjob(
    name: str,
    master: dict[str, Any] | None,
    worker: dict[str, Any] | None = None,
    *,
    workers: int = 2,
    policy: str = "OnFailure",
    run_policy: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    replicas: dict[str, Any] = {}
    if master is not None:
        replicas["Master"] = {"replicas": 1, "restartPolicy": policy, "template": master}
    if worker is not None:
        replicas["Worker"] = {"replicas": workers, "restartPolicy": policy, "template": worker}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"runPolicy": run_policy or {}, "pytorchReplicaSpecs": replicas},
    }


def _follow(backend: LocalBackend, ref: JobRef, timeout: float = 120) -> tuple[JobStatus, list[JobPhase]]:
    """Watch until terminal; the final status and every phase seen on the way."""
    phases: list[JobPhase] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for obj in backend.watch(ref, timeout_seconds=deadline - time.monotonic()):
            status = parse_job_status(obj)
            if not phases or phases[-1] is not status.phase:
                phases.append(status.phase)
            if status.phase.terminal:
                return status, phases
    raise AssertionError(f"not finished within {timeout}s; phases {phases}")


def _wait_for(predicate: Any, timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


ENV_DUMP = """
    import json, os, sys, time
    keys = ["PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_MASTER_ADDR",
            "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "USER_VALUE", "DATA",
            "SCRATCH", "POD_IP", "POD_NAME", "HOSTNAME", "LOCAL_RANK", "FOO_HOST_ONLY", "LC_ALL", "HTTPS_PROXY",
            "MKL_NUM_THREADS"]
    record = {k: os.environ.get(k) for k in keys}
    record["names"] = sorted(os.environ)
    record["argv"] = sys.argv[1:]
    record["cwd"] = os.getcwd()
    open(os.path.join(os.environ["DATA"], "env-" + os.environ["HOSTNAME"] + ".json"), "w").write(json.dumps(record))
    # The job succeeds when the master does, and the workers are then stopped: the master waits for them.
    while os.environ["RANK"] == "0" and len([f for f in os.listdir(os.environ["DATA"]) if f.startswith("env-")]) < 3:
        time.sleep(0.02)
"""


def test_hand_written_pytorchjob_sees_the_operators_env(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "99")  # the caller's own value must not leak into a replica
    monkeypatch.setenv("LOCAL_RANK", "7")
    monkeypatch.setenv("FOO_HOST_ONLY", "leaked")  # the shell that launched it is not the pod's
    monkeypatch.setenv("LC_ALL", "C.UTF-8")  # what this machine needs passes through
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    program = _program(backend, "env.py", ENV_DUMP)
    env = [
        {"name": "USER_VALUE", "value": "from-the-manifest"},
        {"name": "DATA", "value": "/workspace"},
        {"name": "SCRATCH", "value": "/scratch/tmp"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    command = ["python", program, "--master=$(MASTER_ADDR):$(MASTER_PORT)", "--out", "/workspace/out", "$(RANK)"]
    template = _template(command, env=env, ports=[{"name": "pytorchjob-port", "containerPort": 29555}])
    ref = backend.submit(_pytorchjob("envjob", template, template))
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED
    claim = backend.claim_dir(CLAIM)
    master_ip = backend.pod_address(ref, "envjob-master-0")
    assert master_ip.startswith("127.")
    seen_ips = set()
    for name, rank in (("envjob-master-0", 0), ("envjob-worker-0", 1), ("envjob-worker-1", 2)):
        got = json.loads((claim / f"env-{name}.json").read_text())
        operator = {
            "PYTHONUNBUFFERED": "1",
            "MASTER_ADDR": master_ip,
            "MASTER_PORT": "29555",
            "WORLD_SIZE": "3",
            "RANK": str(rank),
            "PET_MASTER_ADDR": master_ip,
            "PET_MASTER_PORT": "29555",
            "PET_NNODES": "3",
            "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": "auto",  # the operator's defaulting when nprocPerNode is not set
        }
        assert {k: got[k] for k in operator} == operator
        assert got["LOCAL_RANK"] is None
        assert got["FOO_HOST_ONLY"] is None
        assert (got["LC_ALL"], got["HTTPS_PROXY"], got["MKL_NUM_THREADS"]) == (
            "C.UTF-8",
            "http://proxy.example:3128",
            "1",
        )
        # Every name is the image's, the manifest's, the operator's, the backend's or this machine's.
        manifest = {"OMP_NUM_THREADS", "WORK"} | {e["name"] for e in env}
        pod = set(image_environment("registry.example/train:1")) | manifest | set(operator) | {"HOSTNAME"}
        backend_own = {"KUBETRAIN_BIND_ADDRESS", "KUBETRAIN_LOCAL_CONTAINER"}
        unexplained = [n for n in got["names"] if n not in pod | backend_own | MACHINE_ENV and not n.startswith("LC_")]
        assert unexplained == []
        assert got["USER_VALUE"] == "from-the-manifest"
        assert got["DATA"] == str(claim)
        assert got["SCRATCH"].startswith(str(backend.job_dir(ref))) and got["SCRATCH"].endswith("/scratch/tmp")
        assert got["POD_IP"] == backend.pod_address(ref, name)
        assert got["POD_NAME"] == got["HOSTNAME"] == name
        assert got["argv"] == [f"--master={master_ip}:29555", "--out", f"{claim}/out", str(rank)]
        seen_ips.add(got["POD_IP"])
    assert len(seen_ips) == 3  # one loopback address per replica


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


def test_a_missing_command_fails_at_once_naming_replica_and_image(backend: LocalBackend) -> None:
    ref = backend.submit(_pytorchjob("nocmd", _template(["train-without-python", "--x"]), None))
    status, _ = _follow(backend, ref, timeout=20)
    assert status.phase is JobPhase.FAILED
    assert "replica master-0 of PyTorchJob nocmd" in status.message
    assert "'train-without-python' not found" in status.message
    assert "registry.example/train:1" in status.message


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


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the injected bug's traceback
def test_a_crashed_supervisor_reads_as_a_backend_error_and_stops_its_processes(
    backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubetrain.backends.local.operators.pytorchjob import PyTorchJobController

    program = _program(backend, "forever.py", "import time\ntime.sleep(600)\n")
    reconcile = PyTorchJobController.reconcile
    calls: list[int] = []

    def crash_after_start(self: PyTorchJobController, now: float) -> None:
        calls.append(1)
        if len(calls) > 3:  # a bug in a later pass, once the replicas run
            raise RuntimeError("injected controller bug")
        reconcile(self, now)

    monkeypatch.setattr(PyTorchJobController, "reconcile", crash_after_start)
    ref = backend.submit(_pytorchjob("crash", _template(["python", program]), None))
    observed = list(backend.watch(ref, timeout_seconds=60))  # ends when the supervisor dies, not at the timeout
    assert observed
    with pytest.raises(BackendError, match="stopped unexpectedly"):
        backend.get(ref)
    assert _pids_of(tmp_path) == []
    backend.delete(ref)  # returns at once


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


def test_resubmitting_with_the_same_run_labels_adopts_and_other_labels_conflict(backend: LocalBackend) -> None:
    labels = {LABEL_RUN_ID: "run-1", LABEL_TASK_ID: "task-1"}
    program = _program(backend, "wait.py", "import time\ntime.sleep(600)\n")
    manifest = _pytorchjob("twice", _template(["python", program]), None, labels=labels)
    first = backend.submit(manifest)
    assert backend.submit(manifest) == first
    other = _pytorchjob("twice", _template(["python", program]), None, labels={**labels, LABEL_RUN_ID: "run-2"})
    with pytest.raises(JobConflictError, match="belongs to another run"):
        backend.submit(other)
    backend.delete(first)


SUPERVISOR = """
    import json, pathlib, sys, time
    from kubetrain.backends.local.backend import LocalBackend
    root, manifest = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2])
    backend = LocalBackend(root, max_grace_seconds=1.0)
    backend.submit(manifest)
    pid_file = backend.claim_dir("work") / "child.pid"
    while not (pid_file.exists() and pid_file.read_text()):
        time.sleep(0.02)
    print("ready", flush=True)
    time.sleep(600)
"""

# A replica that leaves a child in another process group which ignores SIGTERM (as mpirun leaves
# ranks): the parent-death signal reaches only the main process; the child outlives it unless the
# backend's watchdog kills the whole session.
STUBBORN_TREE = """
    import os, pathlib, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"], process_group=0)
    pathlib.Path(os.environ["WORK"], "child.pid").write_text(str(child.pid))
    time.sleep(600)
"""


def test_a_sigkilled_supervisor_leaves_no_process_behind(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = tmp_path / "root"
    claim = root / "claims" / CLAIM
    claim.mkdir(parents=True)
    (claim / "tree.py").write_text(textwrap.dedent(STUBBORN_TREE))
    manifest = _pytorchjob("orphans", _template(["python", "/workspace/tree.py"]), None)
    supervisor = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SUPERVISOR), str(root), json.dumps(manifest)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert supervisor.stdout is not None and supervisor.stdout.readline().strip() == "ready"
        child = int((claim / "child.pid").read_text())
        supervisor.send_signal(signal.SIGKILL)  # no handler, no atexit: only the watchdog can act
        supervisor.wait(timeout=10)
        _wait_for(lambda: _pids_of(tmp_path) == [], timeout=10, what="the replica's main process to go")
        # The child ignores SIGTERM: it goes only with the watchdog's SIGKILL after the grace period.
        _wait_for(lambda: not _alive(child), timeout=10, what="the replica's child to go")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
