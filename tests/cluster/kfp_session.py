"""The KFP modules' scenarios, all queued together at the session's first KFP test.

Each KFP test module (test_kfp_*.py with a `queue` function) names its scenarios; the session's
`kfp_scenarios` fixture (conftest.py) queues those of every module collected, the longest first,
and runs them side by side, PARALLEL at once (tests/cluster/concurrent.py). Module by module, the
long retry scenario (six minutes) waited alone at its module's end; queued together, the short
ones fill the other slots meanwhile. Each test still waits for its own scenario and fails with it.

A module's `queue(ctx)` returns (name, scenario) pairs; a scenario that must run alone at the end
(the dataset refresh, which rewrites the claim's directory every other run reads) goes in
`queue_last(ctx)`, and waits for all the others first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import pytest

from tests.cluster.concurrent import Scenarios
from tests.cluster.kfp_runs import KfpBackend

# The modules in the order their scenarios are queued: the longest scenarios first.
MODULES = ("test_kfp_retry", "test_kfp_ui", "test_kfp_caching", "test_kfp_backend", "test_kfp_terminate")

Queued = list[tuple[str, Callable[[], object]]]


@dataclass(frozen=True)
class Context:
    """What the scenarios are started with."""

    kfp_backend: KfpBackend
    ui_url: str | None  # None when the KFP tier runs without its UI: the browser scenarios then fail
    tmp: pytest.TempPathFactory
    running: Scenarios


def queue_all(ctx: Context, collected: set[str]) -> list[str]:
    """Queue the scenarios of the MODULES in `collected` (module names); their names, in order."""
    modules = [_module(name) for name in MODULES if name in collected]
    names: list[str] = []
    for module in modules:
        for name, scenario in module.queue(ctx):
            ctx.running.start(name, scenario)
            names.append(name)
    first = list(names)
    for module in modules:
        for name, scenario in getattr(module, "queue_last", lambda _: [])(ctx):
            ctx.running.start(name, _after(ctx.running, first, scenario))
            names.append(name)
    return names


def _after(running: Scenarios, others: list[str], scenario: Callable[[], object]) -> Callable[[], object]:
    def alone_at_the_end() -> object:
        running.wait_ended(others)
        return scenario()

    return alone_at_the_end


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"tests.cluster.{name}")
