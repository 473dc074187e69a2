"""The await loop's notices about a running job that has printed nothing for a while."""

from __future__ import annotations

import pytest

from tests.unit.launcher_memory_backend import MemoryBackend, cond, launch, pod

pytestmark = pytest.mark.timeout(60)


def test_a_silent_running_job_gets_a_notice_and_its_log_ends_the_silence() -> None:
    """Issue 34: a job whose program waited (an MPI rank blocked on a peer that exited) said nothing until its timeout."""
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Created"), cond("Running"))
        b.wait_for_line("no log output for")
        b.add_log("train-abc-master-0", "epoch 1 loss 0.5")
        b.wait_for_line("epoch 1 loss 0.5")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded"))
        b.set_conditions(cond("Created"), cond("Succeeded"))

    lines = launch(backend, script, tuning={"silence_notice_seconds": 0.3})
    notice = next(line for line in lines if "no log output for" in line)
    assert "the job is still running" in notice and "timeout_seconds" in notice


def test_a_silent_job_whose_logs_are_not_followed_gets_a_notice_too() -> None:
    """Issue 34: with the log not followed (launch --no-logs), a hung job said nothing until its timeout."""
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Created"), cond("Running"))
        b.wait_for_line("no news from the job for")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded"))
        b.set_conditions(cond("Created"), cond("Succeeded"))

    lines = launch(backend, script, stream_logs=False, tuning={"silence_notice_seconds": 0.3})
    notice = next(line for line in lines if "no news from the job for" in line)
    assert "the job is still running" in notice and "logs are not followed" in notice


def test_the_silence_notice_comes_once_per_stretch_and_counts_on() -> None:
    from kubetrain.launcher.silence import SilenceWatch

    now = [0.0]
    said: list[str] = []
    watch = SilenceWatch(said.append, after_seconds=600, clock=lambda: now[0])
    now[0] = 599
    assert watch.check() == pytest.approx(1) and said == []
    now[0] = 600
    watch.check()
    now[0] = 900
    watch.check()
    assert said == [said[0]] and said[0].startswith("no log output for 10 minutes;")
    now[0] = 1200
    watch.check()
    assert said[-1].startswith("no log output for 20 minutes;")
    watch.line("epoch 2")
    now[0] = 1500
    watch.check()
    assert said[-1] == "epoch 2"
