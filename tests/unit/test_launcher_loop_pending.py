"""The await loop while a job is pending: the looks at its events (their back-off, their own
thread), pod reasons such as ImagePullBackOff, and rejections found by a look.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from kubetrain.backends.base import EventInfo, JobRef
from kubetrain.errors import (
    JobFailedError,
)
from kubetrain.launcher import Tuning
from kubetrain.launcher.pending import next_interval
from tests.unit.launcher_memory_backend import MemoryBackend, cond, launch, pod

pytestmark = pytest.mark.timeout(60)


def test_image_pull_backoff_is_reported_with_pending_time() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Pending", reason="ImagePullBackOff",
                       message='Back-off pulling image "nope:latest"'))  # fmt: skip
        b.set_conditions(cond("Created"))
        b.wait_for_line("ImagePullBackOff")
        b.set_conditions(cond("Failed", reason="Deadline"))

    with pytest.raises(JobFailedError):
        launch(backend, script)
    lines = backend.lines
    pending = [line for line in lines if "ImagePullBackOff" in line]
    assert pending, lines
    assert (
        'pod train-abc-master-0 [Master 0]: Pending (ImagePullBackOff): Back-off pulling image "nope:latest"'
        in (pending[0])
    )
    assert ", pending " in pending[0]


def test_the_looks_back_off_while_they_find_nothing_new() -> None:
    """The interval doubles up to its maximum while looks find nothing new, stays while they find
    news, and starts again when the job's phase changes."""
    tuning = Tuning(pending_poll_seconds=5.0, pending_poll_max_seconds=60.0)
    every, seen = 5.0, []
    for _ in range(6):
        every = next_interval(every, news=0, phase_changed=False, tuning=tuning)
        seen.append(every)
    assert seen == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0]
    assert next_interval(40.0, news=2, phase_changed=False, tuning=tuning) == 40.0
    assert next_interval(60.0, news=0, phase_changed=True, tuning=tuning) == 5.0


def test_a_pending_job_is_looked_at_again_and_again_in_one_watch_window() -> None:
    """Events are listed while the job is pending, before and after its phase changes, and the job
    watch stays one window throughout: looking costs no watch request."""
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.wait_for(lambda: b.calls.count("events") >= 3, "three looks while Pending")
        looks = b.calls.count("events")
        b.set_conditions(cond("Created"))
        b.wait_for(lambda: b.calls.count("events") >= looks + 2, "two more looks once Created")
        b.set_conditions(cond("Created"), cond("Succeeded"))

    launch(backend, script, tuning={"pending_poll_seconds": 0.01, "pending_poll_max_seconds": 0.04,
                                    "watch_window_seconds": 3600.0})  # fmt: skip
    assert backend.calls.count("watch") == 1


class ThrottledEvents(MemoryBackend):
    """Every events listing hangs, as a 429 with a long Retry-After would, until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.looks_done = 0

    def events(self, ref: JobRef, *, pods: Sequence[str] = ()) -> list[EventInfo]:
        self._call("events")
        self.release.wait(600)
        self.looks_done += 1
        return []


def test_a_look_held_up_by_the_server_does_not_delay_noticing_the_end() -> None:
    """Under load the API server answers a look at the events 429 with Retry-After of half a
    minute; the job ending meanwhile is noticed without waiting for the look: run_job returns
    while the look is still held up."""
    backend = ThrottledEvents()

    def script(b: MemoryBackend) -> None:
        b.wait_for(lambda: "events" in b.calls, "a look at the events")
        b.set_conditions(cond("Created"), cond("Succeeded"))

    try:
        launch(backend, script, tuning={"pending_poll_seconds": 0.01, "watch_window_seconds": 3600.0})
        assert backend.looks_done == 0, "run_job waited for the held-up look"
    finally:
        backend.release.set()
    assert backend.calls.count("watch") == 1


def test_a_rejection_found_by_a_look_ends_a_long_watch_window() -> None:
    """The mpi-operator's ValidationError (no condition, ever) ends the wait at the look that finds
    it: the look closes the open job watch (a window of an hour; without the close the 30 s
    timeout would end the wait instead, as a JobTimeoutError)."""
    backend = MemoryBackend()
    backend.add_event(EventInfo(type="Warning", reason="ValidationError", message="spec.slotsPerWorker: bad",
                                involved_object="MPIJob/train-abc"))  # fmt: skip
    with pytest.raises(JobFailedError, match="ValidationError"):
        launch(backend, lambda b: None, kind="MPIJob",
               tuning={"pending_poll_seconds": 0.01, "watch_window_seconds": 3600.0})  # fmt: skip
    assert backend.calls.count("watch") == 1


def test_mpijob_validation_event_fails_fast() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.add_event(EventInfo(type="Warning", reason="ValidationError", involved_object="MPIJob/train-abc",
                              message="spec.mpiReplicaSpecs[Launcher].replicas: must be 1"))  # fmt: skip

    with pytest.raises(JobFailedError, match="must be 1") as info:
        launch(backend, script, kind="MPIJob")
    assert info.value.reason == "ValidationError"
