"""The master's watch on its worker pods, over the Kubernetes backend against the stand-in API server.

The stand-in plays the scheduler and the kubelet: it marks a running worker pod with the
DisruptionTarget condition the scheduler's preemption writes, deletes it, and adds the Job's
replacement, Pending, then Running. The watch must tell each step once, in order; and where the
API refuses the watch (403: no role), say so in one line and end, so the master runs on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kubetrain.backends.base import JobRef
from kubetrain.elastic.watch import WorkerPodWatch
from kubetrain.elastic.worker_pods import Change, WorkerChange
from kubetrain.manifests.kinds import JOBSET
from tests.fake_apiserver import make_pod
from tests.integration.k8s_launcher_env import NS, Env

JS = "ps-elastic"


def worker(index: int, phase: str, suffix: str = "abcde") -> dict[str, Any]:
    pod = make_pod(JS, NS, kind=JOBSET, replica_type="worker", index=index, phase=phase, container="ps",
                   pod_name=f"{JS}-worker-0-{index}-{suffix}")  # fmt: skip
    pod["spec"]["hostname"] = f"{JS}-worker-0-{index}"
    return pod


class Heard:
    """What the watch told, as it tells it."""

    def __init__(self) -> None:
        self.changes: list[WorkerChange] = []
        self.cv = threading.Condition()

    def __call__(self, change: WorkerChange) -> None:
        with self.cv:
            self.changes.append(change)
            self.cv.notify_all()

    def wait_for(self, count: int) -> list[WorkerChange]:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.changes) >= count, timeout=20), self.changes
            return list(self.changes)


@pytest.fixture
def heard(env: Env) -> Iterator[Heard]:
    """A watch on the JobSet's worker pods, running in a thread until the test ends."""
    heard = Heard()
    watch = WorkerPodWatch(env.backend(), JobRef(JOBSET, JS, NS), heard, window_seconds=5)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    yield heard
    watch.stop()
    thread.join(10)
    assert not thread.is_alive(), "stop() ends the watch"


def test_preemption_then_the_replacement_are_told_once_each(env: Env, heard: Heard) -> None:
    env.api.put_pod(worker(0, "Running"))
    env.api.put_pod(worker(1, "Running"))
    heard.wait_for(2)  # both running at the first look: placed
    victim = worker(1, "Running")
    victim["status"]["conditions"] = [{
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": "default-scheduler: preempting to accommodate a higher priority pod",
    }]  # fmt: skip
    env.api.put_pod(victim)
    env.api.delete_pod(NS, f"{JS}-worker-0-1-abcde")
    env.api.put_pod(worker(1, "Pending", suffix="fghij"))
    env.api.put_pod(worker(1, "Running", suffix="fghij"))
    changes = heard.wait_for(4)
    told = [(c.worker_id, c.change) for c in changes]
    assert sorted(told[:2]) == [(f"{JS}-worker-0-0", Change.PLACED), (f"{JS}-worker-0-1", Change.PLACED)]
    assert told[2:] == [(f"{JS}-worker-0-1", Change.PREEMPTED), (f"{JS}-worker-0-1", Change.PLACED)]
    assert changes[3].pod == f"{JS}-worker-0-1-fghij"


def test_a_refused_watch_says_so_once_and_ends(env: Env) -> None:
    lines: list[str] = []
    env.api.fail_next(
        50,
        403,
        match=lambda r: "/pods" in r.path,
        message='pods is forbidden: User "system:serviceaccount:ns:default" cannot list resource "pods"',
    )
    watch = WorkerPodWatch(env.backend(), JobRef(JOBSET, JS, NS), lambda c: None, log=lines.append, window_seconds=5)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "a refused watch ends"
    [line] = lines
    assert "worker pod watch off" in line and "forbidden" in line and "kubetrain-ps-master" in line
