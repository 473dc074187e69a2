"""The e2e tier's side-by-side scenarios (tests/cluster/concurrent.py): each test still fails as its own.

What the KFP modules rely on: a scenario's failure is raised by its own test with its own
traceback, at most PARALLEL run at once in the order queued, and a module's end waits for all.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

import pytest

from tests.cluster.concurrent import Scenarios, scenarios


def _fails() -> None:
    raise AssertionError("the job was not deleted")


def test_a_scenarios_failure_is_raised_by_its_own_result_with_its_traceback() -> None:
    with scenarios(2) as running:
        running.start("fails", _fails)
        running.start("passes", lambda: "run-1")
        assert running.result("passes") == "run-1"
        with pytest.raises(AssertionError, match="the job was not deleted") as info:
            running.result("fails")
    assert "_fails" in "".join(traceback.format_tb(info.value.__traceback__))


def test_no_more_than_parallel_run_at_once_and_in_the_order_queued() -> None:
    lock = threading.Lock()
    now, peak, order = [0], [0], []

    def one(name: str) -> None:
        with lock:
            order.append(name)
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1

    with scenarios(2) as running:
        for name in "abcdef":
            running.start(name, lambda n=name: one(n))
    assert peak[0] == 2
    assert order[:2] == ["a", "b"] and sorted(order) == list("abcdef")


def test_the_block_ends_only_when_every_scenario_has() -> None:
    ended = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        ended.set()

    with scenarios(1) as running:
        running.start("slow", slow)
    assert ended.is_set()


def test_waiting_for_others_does_not_raise_their_failures() -> None:
    with scenarios(2) as running:
        running.start("fails", _fails)
        running.wait_ended(["fails"])  # the refresh scenario waits so, then goes on
        with pytest.raises(AssertionError):
            running.result("fails")


def test_a_name_queued_twice_and_a_parallel_below_one_are_refused() -> None:
    with scenarios(1) as running:
        running.start("a", lambda: None)
        with pytest.raises(ValueError, match="queued twice"):
            running.start("a", lambda: None)
    with pytest.raises(ValueError, match="KUBETRAIN_E2E_PARALLEL=0"):
        Scenarios(0)


def test_the_session_queues_collected_modules_only_and_runs_a_last_scenario_alone_after_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from tests.cluster import kfp_session

    events: list[str] = []

    def step(name: str, seconds: float) -> Callable[[], None]:
        def run() -> None:
            events.append(f"{name} start")
            time.sleep(seconds)
            events.append(f"{name} end")

        return run

    modules = {
        "test_kfp_retry": SimpleNamespace(queue=lambda ctx: [("lost", step("lost", 0.3))]),
        "test_kfp_caching": SimpleNamespace(
            queue=lambda ctx: [("second-run", step("second-run", 0.1))],
            queue_last=lambda ctx: [("refresh", step("refresh", 0.0))],
        ),
        "test_kfp_terminate": SimpleNamespace(queue=lambda ctx: [("never", step("never", 0.0))]),
    }
    monkeypatch.setattr(kfp_session, "_module", modules.__getitem__)
    with scenarios(3) as running:
        context = kfp_session.Context(None, None, None, running)  # type: ignore[arg-type]
        names = kfp_session.queue_all(context, {"test_kfp_retry", "test_kfp_caching"})
    assert names == ["lost", "second-run", "refresh"]  # terminate's module was not collected
    assert events.index("refresh start") > max(events.index("lost end"), events.index("second-run end"))
