"""Shared test fixtures: repository paths and the upstream CRDs of the pinned operator modules."""

from __future__ import annotations

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
