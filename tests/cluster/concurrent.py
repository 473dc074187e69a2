"""Scenarios of one e2e module run side by side, each still checked (and reported) by its own test.

A KFP scenario spends most of its minutes waiting: for Argo to step, for a driver pod, for a
training pod to start, for the end to be noticed. Run one after another, the waits add up (the
backend tier took 26 minutes on the 2-core machine); run together they overlap. A module starts
its scenarios in a module fixture (`Scenarios.start`), at most `PARALLEL` at once, in the order
given, and each test waits for its own (`Scenarios.result`): its failure, with the scenario's own
traceback, is that test's failure, so a red test still names the scenario that broke.

Every scenario must be independent of the others: its own run, its own job (found by the run's
label), its own temporary directory. KUBETRAIN_E2E_PARALLEL=1 runs them one at a time, in the
same order (to tell a concurrency problem from a plain one).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager

# Four at once: about 20 pods on the node (a run's drivers, its launcher, its job's pods) and
# about 6 GB of training processes at most, on the 2-core, 24 GB machine.
PARALLEL = int(os.environ.get("KUBETRAIN_E2E_PARALLEL", "4"))


class Scenarios:
    """A module's scenarios, running in background threads from the module's start."""

    def __init__(self, parallel: int = PARALLEL) -> None:
        if parallel < 1:
            raise ValueError(f"KUBETRAIN_E2E_PARALLEL={parallel}: set it to 1 or more")
        self._pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="scenario")
        self._futures: dict[str, Future[object]] = {}
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def start(self, name: str, scenario: Callable[[], object]) -> None:
        """Queue `scenario` under `name`; it starts as soon as a slot is free (in the order queued)."""
        if name in self._futures:
            raise ValueError(f"scenario {name!r} queued twice: give each scenario its own name")
        self._futures[name] = self._pool.submit(self._timed, name, scenario)

    def result(self, name: str) -> object:
        """Wait for the scenario `name` to end: its return value, or its exception raised here."""
        return self._futures[name].result()

    def wait_ended(self, names: list[str]) -> None:
        """Wait for the scenarios `names` to end, however they end (each one's failure is its own test's)."""
        wait([self._futures[name] for name in names])

    def seconds(self, name: str) -> float:
        """How long the scenario `name` ran (its own wall time, from its start to its end)."""
        self.result(name)
        return self._seconds[name]

    def _timed(self, name: str, scenario: Callable[[], object]) -> object:
        start = time.monotonic()
        try:
            return scenario()
        finally:
            with self._lock:
                self._seconds[name] = time.monotonic() - start
            print(f"\nscenario {name}: {self._seconds[name]:.0f} s")

    def close(self) -> None:
        """Wait for every scenario still running (a module's end must not leave one behind)."""
        self._pool.shutdown(wait=True, cancel_futures=False)


@contextmanager
def scenarios(parallel: int = PARALLEL) -> Iterator[Scenarios]:
    """A `Scenarios` for a module fixture's `with` block; every scenario has ended when it exits."""
    started = Scenarios(parallel)
    try:
        yield started
    finally:
        started.close()
