"""Fixtures the integration tests share: the stand-in API server (`env`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_apiserver import FakeApiServer
from tests.integration.k8s_launcher_env import NS, Env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A stand-in API server, a kubeconfig pointing at it, and a place for the launcher's lines."""
    with FakeApiServer(bookmark_seconds=0.1) as api:
        yield Env(api=api, kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS))
