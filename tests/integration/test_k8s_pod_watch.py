"""The launcher's pod watch and its primary-pod choice, against the stand-in for the API server.

tests/fake_apiserver.py is an in-process HTTP stand-in, NOT a cluster: the scripts below play the
Trainer, the Job controller and the kubelet. What they check is what was found against the real
Trainer v2.3 controller (tests/cluster):

- an MPI TrainJob's launcher pod is created only once every node is Ready, and a node runs sshd,
  whose log never ends: the launcher must follow the launcher pod, never node 0;
- a launcher container that crash-loops past its Job's backoffLimit has its pod deleted by the Job
  controller before the JobSet and the TrainJob fail: the crash must be reported as it happens,
  its log tail read while the pod exists, and the failure must name the pod with that tail.

Plus the pod watch itself (label selector, resume from resourceVersion, 410, bookmarks, closing
from another thread) and the stand-in's own checks of what it is asked and what it serves.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from kubetrain.backends.base import JobRef, PodInfo
from kubetrain.errors import JobFailedError
from kubetrain.manifests import build_trainjob
from kubetrain.manifests.kinds import PYTORCHJOB, TRAINJOB
from kubetrain.specs import TrainJobSpec
from kubetrain.specs.common import ReplicaSpec
from kubetrain.status import JobPhase
from tests.fake_apiserver import FakeApiServer, make_pod
from tests.fake_apiserver_http import TRUE
from tests.integration.k8s_launcher_env import IMAGE, NS, Env, cond, meta, pytorch_manifest

pytestmark = pytest.mark.timeout(90)


def mpi_trainjob(name: str) -> dict[str, Any]:
    spec = TrainJobSpec(meta=meta(name), runtime="kubetrain-mpi", trainer=ReplicaSpec(image=IMAGE, replicas=2))
    return build_trainjob(spec)


def jobs_status(node_ready: int, launcher_active: int = 0, launcher_failed: int = 0) -> list[dict[str, Any]]:
    """`status.jobsStatus` as Trainer v2.3 writes it: both replicated jobs from the first status on."""
    return [
        {"name": "node", "active": 2, "ready": node_ready, "succeeded": 0, "failed": 0, "suspended": 0},
        {"name": "launcher", "active": launcher_active, "ready": 0, "succeeded": 0, "failed": launcher_failed,
         "suspended": 0},
    ]  # fmt: skip


def trainjob_pod(name: str, rjob: str, index: int, **kw: Any) -> dict[str, Any]:
    return make_pod(name, NS, kind=TRAINJOB, replica_type=rjob, index=index, container="node", **kw)


def pod_name(name: str, rjob: str, index: int) -> str:
    return str(trainjob_pod(name, rjob, index)["metadata"]["name"])


def start_nodes(api: FakeApiServer, env: Env, name: str) -> None:
    """The nodes run sshd (a log that never ends); the Trainer's status names node and launcher."""
    api.wait_job(TRAINJOB, NS, name)
    for i in (0, 1):
        api.put_pod(trainjob_pod(name, "node", i, phase="Running"))
    api.append_log(NS, pod_name(name, "node", 0), "node", "Server listening on 0.0.0.0 port 2222.")
    env.wait_line(f"pod {pod_name(name, 'node', 1)} [node 1]: Running")
    api.set_status(TRAINJOB, NS, name, {"jobsStatus": jobs_status(node_ready=2)})
    env.wait_line("→ Running")  # the launcher has seen the status naming the launcher


# -- defect 1: the primary pod -------------------------------------------------------------------


def test_an_mpi_trainjob_follows_its_launcher_pod_not_node_0(env: Env) -> None:
    name = "tjm"
    launcher = pod_name(name, "launcher", 0)

    def script(api: FakeApiServer) -> None:
        start_nodes(api, env, name)
        # JobSet dependsOn: the launcher's Job is created once the nodes are Ready.
        api.put_pod(trainjob_pod(name, "launcher", 0))
        api.put_pod(trainjob_pod(name, "launcher", 0, phase="Running"))
        api.append_log(NS, launcher, "node", "mpirun: 2 ranks", "rank 0: accuracy 0.97")
        env.wait_line("rank 0: accuracy 0.97")
        api.put_pod(trainjob_pod(name, "launcher", 0, phase="Succeeded"))
        api.set_conditions(TRAINJOB, NS, name, cond("Complete", "JobSetCompleted", "jobset completed"),
                           jobsStatus=jobs_status(node_ready=2))  # fmt: skip

    result = env.launch(mpi_trainjob(name), script)
    assert result.phase == JobPhase.SUCCEEDED
    assert f"[{launcher}] mpirun: 2 ranks" in env.lines
    assert any(line.startswith(f"following the log of pod {launcher} [launcher 0]") for line in env.lines)
    assert not any("following the log of pod tjm-node" in line for line in env.lines), env.lines
    assert {r.path.split("/")[-2] for r in env.requests("get", "pods/log")} == {launcher}


# -- defect 2: crashes, reported as they happen and named after their pod is gone ------------------


def test_a_crash_loop_is_reported_while_the_job_runs(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running"))
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker", phase="Running"))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Created"), cond("Running", "PyTorchJobRunning"))
        env.wait_line("→ Running")
        env.wait_line("pod train-worker-0 [Worker 0]: Running")
        api.append_log(NS, "train-worker-0", "pytorch", "RuntimeError: CUDA error", restart=0)
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker", phase="Running", restarts=1,
                             waiting="CrashLoopBackOff", last_exit_code=1))  # fmt: skip
        # No job status changes: the line comes from the pod watch alone.
        env.wait_line("CrashLoopBackOff")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker", phase="Succeeded", restarts=1))
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Succeeded"))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded", "PyTorchJobSucceeded"))

    env.launch(pytorch_manifest(), script)
    assert (
        "pod train-worker-0 [Worker 0]: container restarted (restart 1, last exit code 1); now Running "
        "(CrashLoopBackOff)" in env.lines
    )


def test_a_crash_looping_launcher_deleted_before_the_job_fails_is_named_with_its_tail(env: Env) -> None:
    name = "tjc"
    launcher = pod_name(name, "launcher", 0)
    message = f"jobset failed due to one or more job failures (first failed job: {name}-launcher-0)"

    def tail_read(r: Any) -> bool:
        return (r.resource == "pods/log" and r.path.endswith(f"/{launcher}/log")
                and r.query.get("previous") in TRUE and "tailLines" in r.query)  # fmt: skip

    def script(api: FakeApiServer) -> None:
        start_nodes(api, env, name)
        api.put_pod(trainjob_pod(name, "launcher", 0, phase="Running"))
        api.set_status(TRAINJOB, NS, name, {"jobsStatus": jobs_status(node_ready=2, launcher_active=1)})
        env.wait_line(f"pod {launcher} [launcher 0]: Running")
        api.append_log(NS, launcher, "node", "loading shard 3", "ValueError: corrupt record 17", restart=6)
        # The kubelet: the container crashed past the Job's backoffLimit (6) and waits to restart.
        api.put_pod(trainjob_pod(name, "launcher", 0, phase="Running", restarts=7, waiting="CrashLoopBackOff",
                                 last_exit_code=1))  # fmt: skip
        env.wait_line("CrashLoopBackOff")
        api.wait_request(tail_read, "the crashed container's tail read while its pod exists")
        # The Job controller fails the Job and deletes its pod; then the JobSet and the TrainJob fail.
        api.delete_pod(NS, launcher)
        env.wait_line(f"pod {launcher}: deleted")
        api.set_conditions(TRAINJOB, NS, name, cond("Failed", "JobSetFailed", message),
                           jobsStatus=jobs_status(node_ready=2, launcher_failed=1))  # fmt: skip

    with pytest.raises(JobFailedError) as info:
        env.launch(mpi_trainjob(name), script, delete_after="always")
    err = info.value
    text = str(err)
    assert message in text
    assert err.log_tails[f"{launcher}/node"] == "loading shard 3\nValueError: corrupt record 17"
    when = "(pod deleted since; read when it crashed: Running, CrashLoopBackOff, restart 7, exit code 1)"
    # The crashed container's last lines are shown once: in the report, or (issue 49.8) above it when
    # the log follower had written that container's log to its end before the pod went.
    tail_block = f"--- last 5 lines of {launcher}/node {when} ---\nloading shard 3\nValueError: corrupt record 17"
    if tail_block not in text:
        assert f"--- {launcher}/node {when}: its log is above, followed to its end ---" in text, text
        assert any("ValueError: corrupt record 17" in line for line in env.lines), env.lines
    assert "no failed pod left" not in text
    assert (f"pod {launcher} [launcher 0]: container restarted (restart 7, last exit code 1); now Running "
            "(CrashLoopBackOff)") in env.lines  # fmt: skip


def test_pods_are_watched_not_listed_while_the_job_is_pending(env: Env) -> None:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", waiting="ImagePullBackOff"))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Created"))
        env.wait_line("ImagePullBackOff")
        # Several pending-poll windows: events are listed in each (the API has no watch for their reasons)...
        api.wait_until(lambda: len(env.requests("list", "events")) >= 6, "three looks at the events")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Succeeded"))
        # As on a cluster, the operator's Succeeded comes after the pod stream has told of the pod's
        # end (here: once the launcher has read the ended pod's log without following).
        api.wait_until(lambda: any(r.query.get("follow") not in TRUE for r in env.requests("get", "pods/log")),
                       "the ended pod's log read")  # fmt: skip
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded", "PyTorchJobSucceeded"))

    env.launch(pytorch_manifest(workers=0), script)
    # ... and pods never: the watch begins at the job's creation, and a success whose pods were
    # seen ending needs no last look.
    assert not env.requests("list", "pods")
    [watch] = env.requests("watch", "pods")
    assert watch.query["labelSelector"] == "training.kubeflow.org/job-name=train"
    assert watch.query["allowWatchBookmarks"] in TRUE


# -- the pod watch of the backend ------------------------------------------------------------------


class Collector(threading.Thread):
    """Iterates one pod watch in a thread of its own, as the launcher's tracker does."""

    def __init__(self, env: Env, ref: JobRef, timeout: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.backend = env.backend()
        self.stream = self.backend.watch_pods(ref, timeout_seconds=timeout)
        self.sets: list[list[PodInfo]] = []
        self.api = env.api

    def run(self) -> None:
        for pods in self.stream:
            with self.api.cv:
                self.sets.append(pods)
                self.api.cv.notify_all()

    def names(self) -> list[list[str]]:
        return [[p.name for p in pods] for pods in self.sets]

    def wait_for(self, names: list[str]) -> None:
        self.api.wait_until(lambda: bool(self.sets) and [p.name for p in self.sets[-1]] == names, f"pods {names}")

    def stop(self) -> None:
        self.stream.close()
        self.join(10)
        self.backend.close()
        assert not self.is_alive(), "close() from another thread must end an iteration blocked in a read"


def test_pod_watch_selects_resumes_relists_after_410_and_closes_from_another_thread(env: Env) -> None:
    api = env.api
    api.put_pod(make_pod("other", NS, kind=PYTORCHJOB, replica_type="Master"))
    api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master"))
    watcher = Collector(env, JobRef(kind=PYTORCHJOB, name="train", namespace=NS))
    watcher.start()
    try:
        watcher.wait_for(["train-master-0"])
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker"))
        api.put_pod(make_pod("other", NS, kind=PYTORCHJOB, replica_type="Worker"))
        watcher.wait_for(["train-master-0", "train-worker-0"])
        # A connection dropped mid-stream, then one cut: the watch resumes from the last
        # resourceVersion and loses nothing.
        watches = len(env.requests("watch", "pods"))
        api.drop_watches(1, resource="pods")
        api.cut_watches()
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Worker", phase="Running"))
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running"))
        api.wait_until(lambda: [p.phase for p in watcher.sets[-1]] == ["Running", "Running"], "the changes made")
        assert len(env.requests("watch", "pods")) >= watches + 2, "a resumed watch after the cut and after the drop"
        resumed = env.requests("watch", "pods")[watches:]
        assert resumed and all(r.query["resourceVersion"] not in ("", "0") for r in resumed)
        # History compacted: resuming answers 410, and a re-list reports what changed meanwhile.
        lists = len(env.requests("list", "pods"))
        api.cut_watches(expire=True)
        api.delete_pod(NS, "train-worker-0", graceful=False)
        watcher.wait_for(["train-master-0"])
        assert len(env.requests("list", "pods")) == lists + 1
        assert all("other" not in name for names in watcher.names() for name in names)
    finally:
        watcher.stop()
    assert env.requests("watch", "pods")[-1].query["labelSelector"] == "training.kubeflow.org/job-name=train"


def test_the_stand_in_refuses_malformed_watches_and_pods(env: Env) -> None:
    for query in ("watch=true&resourceVersion=abc", "watch=true&labelSelector=app%20in%20(a)", "labelSelector=%3D%3D"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{env.api.url}/api/v1/namespaces/{NS}/pods?{query}", timeout=10)
        assert info.value.code == 400, query
    bad = make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master")
    bad["status"]["phase"] = "Crashing"
    with pytest.raises(AssertionError, match=r"status\.phase 'Crashing'"):
        env.api.put_pod(bad)
    unnamed = make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master")
    unnamed["spec"]["containers"].append({"name": "pytorch", "image": IMAGE})
    with pytest.raises(AssertionError, match="unique names"):
        env.api.put_pod(unnamed)


def test_without_rbac_for_pod_watches_the_job_is_still_followed_to_its_end(env: Env) -> None:
    """A cluster whose Role predates the pod watch (403): said once, and the job still ends normally."""
    env.api.fail_next(100, 403, match=lambda r: r.verb == "watch" and r.resource == "pods",
                      message='pods is forbidden: cannot watch resource "pods"')  # fmt: skip
    script = play_success_master_only(env)
    result = env.launch(pytorch_manifest(workers=0), script)
    assert result.phase == JobPhase.SUCCEEDED
    [said] = [line for line in env.lines if line.startswith("following the pods of the job stopped")]
    assert "HTTP 403" in said and "deploy/rbac.yaml" in said
    assert "[train-master-0] done" in env.lines, "the final look at the pods still finds the log"


def play_success_master_only(env: Env) -> Any:
    def script(api: FakeApiServer) -> None:
        api.wait_job(PYTORCHJOB, NS, "train")
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running"))
        api.append_log(NS, "train-master-0", "pytorch", "done")
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Running"))
        env.wait_line("→ Running")
        env.wait_line("following the pods of the job stopped")  # said while the job runs
        api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Succeeded"))
        api.set_conditions(PYTORCHJOB, NS, "train", cond("Succeeded", "PyTorchJobSucceeded"))

    return script
