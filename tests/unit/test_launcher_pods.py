"""Which pod's log is the job's log, and what the launcher remembers of pods that crashed.

The pure parts (primary_pod, crashed, PodBook) are checked directly; the await loop against the
in-memory backend of tests/unit/launcher_memory_backend.py (its pod stream notifies on every change). The same
scenarios run against the HTTP stand-in for the API server in tests/integration/test_k8s_pod_watch.py
and with real processes in tests/integration/test_local_launcher_pods.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubetrain.backends.base import JobRef, PodInfo
from kubetrain.errors import BackendError, JobFailedError
from kubetrain.launcher.logs import primary_pod
from kubetrain.launcher.pods import PodBook, PodTracker, crashed
from kubetrain.manifests.kinds import JOBSET, PYTORCHJOB, TRAINJOB, JobKind
from kubetrain.status import parse_job_status
from tests.unit.launcher_memory_backend import MemoryBackend, cond, launch, manifest, pod

pytestmark = pytest.mark.timeout(60)


def ref(kind: JobKind) -> JobRef:
    return JobRef(kind=kind, name="j", namespace="ns")


# -- the primary pod -----------------------------------------------------------------------------


def test_an_mpi_trainjob_waits_for_its_launcher_while_only_nodes_have_pods() -> None:
    nodes = [pod("j-node-0-0", "node", 0, "Running"), pod("j-node-0-1", "node", 1, "Running")]
    assert primary_pod(ref(TRAINJOB), nodes, ("node", "launcher")) is None
    launcher = pod("j-launcher-0-0", "launcher", 0, "Pending")
    assert primary_pod(ref(TRAINJOB), [*nodes, launcher], ("node", "launcher")) == launcher


def test_a_torch_trainjob_has_no_launcher_so_node_0_is_primary() -> None:
    nodes = [pod("j-node-0-1", "node", 1, "Running"), pod("j-node-0-0", "node", 0, "Running")]
    assert primary_pod(ref(TRAINJOB), nodes, ("node",)) == nodes[1]


def test_no_pod_is_chosen_before_the_job_names_its_replicas() -> None:
    # The Trainer has not written jobsStatus yet: node 0 may still be the wrong pod.
    assert primary_pod(ref(TRAINJOB), [pod("j-node-0-0", "node", 0, "Running")], ()) is None


def test_a_pytorchjob_waits_for_its_master_and_without_one_follows_worker_0() -> None:
    worker = pod("j-worker-0", "Worker", 0, "Running")
    assert primary_pod(ref(PYTORCHJOB), [worker], ("Master", "Worker")) is None
    assert primary_pod(ref(PYTORCHJOB), [worker], ("Worker",)) == worker


def test_a_jobset_without_the_primary_replica_follows_its_first_pod() -> None:
    pods = [pod("j-worker-0-0", "worker", 0, "Running"), pod("j-driver-0-0", "driver", 0, "Running")]
    assert primary_pod(ref(JOBSET), pods, ("driver", "worker")) == pods[1]


def test_replica_names_come_from_the_spec_and_from_a_trainjobs_status() -> None:
    job = manifest("j", "PyTorchJob")
    assert parse_job_status(job).replica_names == ("Master", "Worker")
    trainjob: dict[str, Any] = {**manifest("j", "TrainJob"), "status": {"jobsStatus": [
        {"name": "node", "active": 2}, {"name": "launcher", "active": 0}]}}  # fmt: skip
    assert parse_job_status(trainjob).replica_names == ("node", "launcher")


# -- crashes and the book ------------------------------------------------------------------------


def test_a_crash_is_a_restart_a_crash_loop_or_the_failed_phase_seen_once() -> None:
    running = pod("p", "Worker", 0, "Running")
    looping = pod("p", "Worker", 0, "Running", restart_count=3, reason="CrashLoopBackOff", exit_code=1)
    assert crashed(running, looping)
    assert not crashed(looping, looping)
    assert crashed(None, looping)  # first seen after its crashes
    assert crashed(running, pod("p", "Worker", 0, "Failed", reason="Error", exit_code=1))
    # The local kubelet's back-off: Failed (CrashLoopBackOff), then running again as restart 1.
    local_wait = pod("p", "Worker", 0, "Failed", reason="CrashLoopBackOff", exit_code=1)
    assert crashed(local_wait, pod("p", "Worker", 0, "Running", restart_count=1))
    assert not crashed(running, pod("p", "Worker", 0, "Succeeded", exit_code=0))


def test_the_book_keeps_the_last_state_of_pods_that_are_gone() -> None:
    book = PodBook()
    looping = pod("launcher", "launcher", 0, "Running", restart_count=7, reason="CrashLoopBackOff", exit_code=1)
    assert book.update([pod("node-0", "node", 0, "Running"), pod("launcher", "launcher", 0, "Running")]) == []
    assert book.update([pod("node-0", "node", 0, "Running"), looping]) == [looping]
    book.update([pod("node-0", "node", 0, "Running")])  # the Job controller deleted the launcher pod
    assert book.gone == {"launcher": looping}
    assert book.failed() == [looping]
    done = pod("node-0", "node", 0, "Succeeded", exit_code=0)
    book.update([done])
    book.update([])
    assert book.failed() == [looping], "a pod that succeeded and went is no failure"


class LogsGoneAfterOneRead(MemoryBackend):
    """The first log read works; later ones fail as for a pod its controller has deleted."""

    def pod_log(
        self, ref: JobRef, pod: PodInfo, *, follow: bool, tail_lines: int | None = None, previous: bool = False
    ) -> Iterator[str]:
        if any(call.startswith("log ") for call in self.calls):
            self._call(f"log {pod.name} refused")
            raise BackendError(f'pods "{pod.name}" not found')
        return super().pod_log(ref, pod, follow=follow, tail_lines=tail_lines, previous=previous)


def test_a_tail_that_cannot_be_read_any_more_keeps_the_one_read_at_the_earlier_crash() -> None:
    backend = LogsGoneAfterOneRead()
    backend.add_log("w", "ValueError: corrupt record 17", previous=True)
    tracker = PodTracker(backend, ref(PYTORCHJOB), listeners=[], sink=backend.sink, tail_lines=5, window_seconds=30)
    tracker.start()
    try:
        backend.set_pods(pod("w", "Worker", 0, "Running", restart_count=1, reason="CrashLoopBackOff"))
        backend.wait_for(lambda: "log w previous=True follow=False tail=5" in backend.calls, "the first tail read")
        backend.set_pods(pod("w", "Worker", 0, "Running", restart_count=2, reason="CrashLoopBackOff"))
        backend.wait_for(lambda: "log w refused" in backend.calls, "the second tail read")
    finally:
        tracker.stop(10)
    assert not tracker.is_alive()
    assert tracker.book.tails["w"].text == "ValueError: corrupt record 17"
    assert tracker.book.tails["w"].pod.restart_count == 1


# -- the await loop --------------------------------------------------------------------------------


def test_the_loop_follows_the_launcher_of_an_mpi_trainjob_not_node_0() -> None:
    backend = MemoryBackend()
    jobs = [{"name": "node", "active": 2, "ready": 2}, {"name": "launcher", "active": 0}]

    def script(b: MemoryBackend) -> None:
        nodes = [pod("train-abc-node-0-0", "node", 0, "Running"), pod("train-abc-node-0-1", "node", 1, "Running")]
        b.add_log("train-abc-node-0-0", "Server listening on 0.0.0.0 port 2222.")
        b.set_pods(*nodes)
        b.set_conditions(jobsStatus=jobs)
        b.wait_for_line("pod train-abc-node-0-1 [node 1]: Running")
        b.wait_for_line("→ Running")  # the launcher has seen the status naming a launcher
        launcher = pod("train-abc-launcher-0-0", "launcher", 0, "Running")
        b.add_log("train-abc-launcher-0-0", "mpirun: 2 ranks", "accuracy 0.97")
        b.set_pods(*nodes, launcher)
        b.wait_for_line("accuracy 0.97")
        b.set_pods(*nodes, pod("train-abc-launcher-0-0", "launcher", 0, "Succeeded", exit_code=0))
        b.set_conditions(cond("Complete", reason="JobSetCompleted"), jobsStatus=jobs)

    lines = launch(backend, script, kind="TrainJob")
    assert "following the log of pod train-abc-launcher-0-0 [launcher 0], container pytorch" in lines
    assert not any(line.startswith("following the log of pod train-abc-node") for line in lines)
    assert not any(call.startswith("log train-abc-node") for call in backend.calls), backend.calls


def test_a_crash_looping_pod_deleted_before_the_job_fails_is_named_with_its_tail() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        master = pod("train-abc-master-0", "Master", 0, "Running")
        b.set_pods(master, pod("train-abc-worker-0", "Worker", 0, "Running"))
        b.set_conditions(cond("Running"))
        b.wait_for_line("→ Running")
        b.wait_for_line("pod train-abc-worker-0 [Worker 0]: Running")
        b.add_log("train-abc-worker-0", "loading shard 3", "ValueError: corrupt record 17", previous=True)
        b.set_pods(master, pod("train-abc-worker-0", "Worker", 0, "Running", restart_count=4, reason="CrashLoopBackOff",
                               exit_code=1))  # fmt: skip
        # Reported as it happens, while the job is still Running, and its log read while the pod exists.
        b.wait_for_line("CrashLoopBackOff")
        b.wait_for(lambda: "log train-abc-worker-0 previous=True follow=False tail=5" in b.calls, "the tail read")
        b.set_pods(master)  # its controller deleted it
        b.wait_for_line("pod train-abc-worker-0: deleted")
        b.set_conditions(cond("Failed", reason="PyTorchJobFailed", message="Worker 0 failed past its backoff limit"))

    with pytest.raises(JobFailedError) as info:
        launch(backend, script, tuning={"log_tail_lines": 5})
    err = info.value
    assert err.log_tails == {"train-abc-worker-0/pytorch": "loading shard 3\nValueError: corrupt record 17"}
    message = str(err)
    assert "train-abc-worker-0/pytorch (pod deleted since; read when it crashed: Running, CrashLoopBackOff, " \
           "restart 4, exit code 1)" in message  # fmt: skip
    assert "no failed pod left" not in message
    crash_line = next(line for line in backend.lines if "CrashLoopBackOff" in line)
    assert crash_line == (
        "pod train-abc-worker-0 [Worker 0]: container restarted (restart 4, last exit code 1); "
        "now Running (CrashLoopBackOff)"
    )


def test_pods_are_watched_not_listed_while_the_job_runs() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Pending", reason="ImagePullBackOff"))
        b.set_conditions(cond("Created"))
        b.wait_for_line("ImagePullBackOff")
        b.wait_for(lambda: b.calls.count("events") >= 3, "three looks at the events")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded", exit_code=0))
        # As on a cluster, the job's Succeeded comes after the pod stream told of the pod's end
        # (here: once the log follower has read the ended pod's log without following).
        b.wait_for(lambda: any(c.startswith("log train-abc-master-0") and "follow=False" in c for c in b.calls),
                   "the ended pod's log read")  # fmt: skip
        b.set_conditions(cond("Succeeded"))

    launch(backend, script)
    # Every change came from the pod stream, and a success whose pods were seen ending needs no
    # last look at them (a failure takes one).
    assert backend.calls.count("pods") == 0, backend.calls
    assert backend.calls.count("watch_pods") >= 1
