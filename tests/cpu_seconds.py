"""An opt-in pytest plugin: the CPU-seconds each test phase spent, its child processes included.

Wall time is noisy on a shared machine; CPU-seconds are what a test costs the builds beside it.
Load it and ask for the top N: ``pytest -p tests.cpu_seconds --cpu-seconds=25 ...`` (works under
pytest-xdist: each worker measures its own tests and the numbers travel in the reports).

Each phase (setup, call, teardown) is charged the user + system time of the pytest process and of
the children it reaped meanwhile (``getrusage``: a child's own reaped children count too). A
process reaped later (a module fixture's server, stopped at the module's end) is charged to the
phase that reaps it, as ``--durations`` charges a module fixture to the first test's setup.
"""

from __future__ import annotations

import resource
from collections.abc import Generator

import pytest

_KEY = "cpu_seconds"
_phases = pytest.StashKey[dict[str, float]]()


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--cpu-seconds=N``: list the N test phases that used the most CPU (0: only the total)."""
    parser.addoption(
        "--cpu-seconds",
        type=int,
        default=None,
        metavar="N",
        help="list the N test phases that used the most CPU-seconds, children included (0: total only)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Measure the setup phase."""
    return (yield from _measured(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Measure the call phase."""
    return (yield from _measured(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """Measure the teardown phase."""
    return (yield from _measured(item, "teardown"))


def _measured(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    start = _cpu_now()
    try:
        return (yield)
    finally:
        item.stash.setdefault(_phases, {})[phase] = _cpu_now() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Put the phase's CPU-seconds into its report, which pytest-xdist carries to the controller."""
    report = yield
    spent = item.stash.get(_phases, {}).get(call.when)
    if spent is not None:
        report.user_properties.append((_KEY, spent))
    return report


class _Tally:
    def __init__(self) -> None:
        self.phases: list[tuple[float, str, str]] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == _KEY and isinstance(value, float):
                self.phases.append((value, report.when or "", report.nodeid))

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        count = terminalreporter.config.getoption("cpu_seconds")
        total = sum(spent for spent, _, _ in self.phases)
        terminalreporter.write_sep("=", f"CPU-seconds by test phase (children included): {total:.1f} in all")
        for spent, when, nodeid in sorted(self.phases, reverse=True)[:count]:
            terminalreporter.write_line(f"{spent:8.2f}s {when:<8} {nodeid}")


def pytest_configure(config: pytest.Config) -> None:
    """Collect and print the tally only where asked, and only on the controller under xdist."""
    if config.getoption("cpu_seconds") is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Tally(), "cpu_seconds_tally")
