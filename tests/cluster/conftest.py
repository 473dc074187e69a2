"""The real-control-plane tier (`make e2e`): one cluster per session, started by tools/cluster (`python -m tools.cluster`).

It runs only when KUBETRAIN_E2E=1 (`make e2e` sets it): a plain `pytest` or `make test` skips it,
since a cold first run builds the control plane from the Go module proxy (tens of minutes).
A cluster that cannot start ends the session with one line saying why (a port taken, and by which
process; a component that exited, and its log), instead of the same error under every test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tools.cluster.controlplane import Cluster, down, start_errors, up


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KUBETRAIN_E2E") == "1":
        return
    skip = pytest.mark.skip(reason="the real-control-plane tier runs with `make e2e` (KUBETRAIN_E2E=1)")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The control plane, started once; stopped at the end unless it was running before (`make cluster-up`)."""
    try:
        started = up()
    except start_errors() as e:
        pytest.exit(f"the e2e cluster could not start: {e}", returncode=3)
    yield started
    if started.started_here:
        down()
