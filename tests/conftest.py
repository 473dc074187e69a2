"""Shared test fixtures: repository paths and the upstream CRDs beside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# The upstream CRD schemas live beside the checkout (../shared/crds); they are never copied in.
CRD_DIR = REPO_ROOT.parent / "shared" / "crds"


@pytest.fixture(scope="session")
def crd_dir() -> Path:
    """The directory of upstream CRDs; a missing one is a broken checkout, not a reason to skip."""
    if not (CRD_DIR / "training-operator-v1").is_dir():
        pytest.fail(f"upstream CRDs not found at {CRD_DIR}; the tests need ../shared/crds beside the checkout")
    return CRD_DIR


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root."""
    return REPO_ROOT
