"""The real-control-plane tier (`make e2e`): one cluster per session, started by tests/cluster/controlplane.py."""

from __future__ import annotations

import pytest

from tests.cluster.controlplane import Cluster, up


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """The control plane, started once (or found running from `make cluster-up`); `make cluster-down` stops it."""
    return up()
