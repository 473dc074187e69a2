"""The real-control-plane tier (`make e2e`): one cluster per session, started by tests/cluster/controlplane.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.controlplane import Cluster, down, up


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The control plane, started once; stopped at the end unless it was running before (`make cluster-up`)."""
    started = up()
    yield started
    if started.started_here:
        down()
