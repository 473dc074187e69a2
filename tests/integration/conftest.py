"""Fixtures the integration tests share: the stand-in API server (`env`) and a local backend (`backend`;
modules that need other settings define their own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from tests.fake_apiserver import FakeApiServer
from tests.integration.k8s_launcher_env import NS, Env
from tests.integration.local_jobs import _pids_of


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A stand-in API server, a kubeconfig pointing at it, and a place for the launcher's lines."""
    with FakeApiServer(bookmark_seconds=0.1) as api:
        yield Env(api=api, kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS))


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """A local backend under tmp_path; after the test no process of it may survive."""
    b = LocalBackend(tmp_path / "root", restart_backoff_seconds=0.2, max_grace_seconds=2.0)
    yield b
    b.close()
    assert _pids_of(tmp_path) == []
