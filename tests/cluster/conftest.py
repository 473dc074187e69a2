"""The real-control-plane tier (`make e2e`): one cluster per session, started by tools/cluster (`python -m tools.cluster`).

It runs only when KUBETRAIN_E2E=1 (`make e2e` sets it): a plain `pytest` or `make test` skips it,
since a cold first run builds the control plane from the Go module proxy (tens of minutes).
A cluster that cannot start ends the session with one line saying why (a port taken, and by which
process; a component that exited, and its log), instead of the same error under every test.

Each group of scenarios (a test module), the cluster's start and its stop print one
`phase NAME: start … end … N s` line at the end of the session, as .ci/run's own phases do, so a
CI log shows where the e2e time went. The components whose runs on the real backend all passed
get `lastVerified` in their hub metadata (tests/cluster/verified.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster import verified
from tools.ci.e2e import Jiffies, cpu_jiffies, phase_line
from tools.cluster.controlplane import Cluster, attach, down, start_errors, up


@dataclass
class _Span:
    start: float
    end: float
    cpu_start: Jiffies  # the machine's CPU ticks at start and end (the phase line's busy cores)
    cpu_end: Jiffies


_SPANS: dict[str, _Span] = {}


def _record(name: str, start: float, end: float, cpu_start: Jiffies, cpu_end: Jiffies) -> None:
    span = _SPANS.setdefault(name, _Span(start, end, cpu_start, cpu_end))
    if start < span.start:
        span.start, span.cpu_start = start, cpu_start
    if end > span.end:
        span.end, span.cpu_end = end, cpu_end


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KUBETRAIN_E2E") == "1":
        return
    skip = pytest.mark.skip(reason="the real-control-plane tier runs with `make e2e` (KUBETRAIN_E2E=1)")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # The first scenario's span includes the cluster's start (its fixture), reported on its own too.
    start, cpu = time.time(), cpu_jiffies()
    yield
    _record(f"e2e:{item.path.stem}", start, time.time(), cpu, cpu_jiffies())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.failed:
        verified.note_outcome(report.nodeid, report.passed or report.skipped)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # lastVerified of the components the real-backend runs verified (tests/cluster/verified.py):
    # under `make e2e` only this session's notes, recorded once every session has ended.
    notes = os.environ.get(verified.NOTES_ENV)
    if notes:
        verified.save(Path(notes))
        return
    for path in verified.record():
        print(f"\nlastVerified: {path.relative_to(path.parents[2])}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SPANS:
        return
    terminalreporter.section("phases")
    for name, span in sorted(_SPANS.items(), key=lambda kv: kv[1].start):
        terminalreporter.write_line(phase_line(name, span.start, end=span.end, cpu=(span.cpu_start, span.cpu_end)))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The control plane, started once; stopped at the end unless it was running before (`make cluster-up`)."""
    start, cpu = time.time(), cpu_jiffies()
    try:
        # tools/ci/e2e.py starts the cluster once for the sessions it runs side by side.
        started = attach() if os.environ.get("KUBETRAIN_E2E_ATTACH") == "1" else up()
    except start_errors() as e:
        pytest.exit(f"the e2e cluster could not start: {e}", returncode=3)
    _record("e2e:cluster-up", start, time.time(), cpu, cpu_jiffies())
    yield started
    if started.started_here:
        start, cpu = time.time(), cpu_jiffies()
        down()
        _record("e2e:cluster-down", start, time.time(), cpu, cpu_jiffies())
