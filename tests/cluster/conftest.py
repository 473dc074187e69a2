"""The real-control-plane tier (`make e2e`): one cluster per session, started by tests/cluster/controlplane.py.

It runs only when KUBETRAIN_E2E=1 (`make e2e` sets it): a plain `pytest` or `make test` skips it,
since a cold first run builds the control plane from the Go module proxy (tens of minutes).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.cluster.controlplane import Cluster, down, up


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
    started = up()
    yield started
    if started.started_here:
        down()
