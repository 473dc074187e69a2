"""Shared test fixtures: repository paths and the upstream CRDs of the pinned operator modules."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crds import crd_dir as _pinned_crd_dir

REPO_ROOT = Path(__file__).resolve().parent.parent
# The upstream CRD schemas, from the operator modules pinned in tools/crds (see tests/crds.py);
# never copied into the repository. Fetched once at collection; a failure is a broken set-up,
# not a reason to skip, and it names what is missing.
CRD_DIR = _pinned_crd_dir()


@pytest.fixture(scope="session")
def crd_dir() -> Path:
    """The directory of upstream CRDs."""
    return CRD_DIR


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root."""
    return REPO_ROOT


@pytest.fixture(autouse=True)
def _alone_when_marked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist, a test marked `alone` runs while no other worker runs a test.

    For jobs that listen on every interface at a port other local jobs use (a user's program
    rendezvousing through env:// at the operator's default 23456): on one machine that port is
    everyone's, where on a cluster each pod has its own address. Every test holds a shared lock,
    an `alone` test an exclusive one; the turnstile keeps the other worker's stream of shared
    holders from starving it.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent  # the session's directory, above each worker's
    alone = request.node.get_closest_marker("alone") is not None
    with open(shared / "alone.turnstile", "a") as turnstile, open(shared / "alone.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
