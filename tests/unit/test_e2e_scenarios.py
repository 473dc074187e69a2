"""The e2e tier's side-by-side scenarios (tests/cluster/concurrent.py): each test still fails as its own.

What the KFP modules rely on: a scenario's failure is raised by its own test with its own
traceback, at most PARALLEL run at once in the order queued, and a module's end waits for all.
"""

from __future__ import annotations

import threading
import time
import traceback
from functools import partial

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
            running.start(name, partial(one, name))
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
