"""The CRDs the tests use come from the pinned operator modules; ../shared/crds is a cross-check only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CRD_DIR, REPO_ROOT
from tests.crds import SOURCES

SHARED = REPO_ROOT.parent / "shared" / "crds"


def test_every_crd_the_schema_checks_need_is_there() -> None:
    from kubetrain.manifests.schema import CRD_FILES

    for relative in CRD_FILES.values():
        assert (CRD_DIR / relative).is_file(), f"{relative} missing from {CRD_DIR}"
    assert set(CRD_FILES.values()) <= set(SOURCES)


@pytest.mark.parametrize("relative", sorted(SOURCES))
def test_pinned_crds_match_the_shared_copies(relative: str) -> None:
    """Where the team's reference copies exist beside the checkout, the pinned modules hold the same bytes."""
    shared = SHARED / relative
    if not shared.is_file():
        pytest.skip(f"no reference copy at {shared} (a fresh clone with nothing beside it)")
    assert (CRD_DIR / relative).read_bytes() == shared.read_bytes(), f"{relative} differs from {shared}"


def test_the_pins_are_a_go_module_with_checksums() -> None:
    go_sum = (REPO_ROOT / "tools" / "crds" / "go.sum").read_text()
    for module, _ in set(SOURCES.values()):
        assert f"{module} v" in go_sum, f"{module} has no checksum in tools/crds/go.sum"
    assert Path(CRD_DIR).is_dir()
