"""`make e2e`'s two halves: every module once, those that need no image first (they run while the images build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.ci import e2e


def test_both_halves_together_run_every_e2e_module_and_the_built_pieces_tests_once() -> None:
    kfp, others = e2e.halves()
    modules = sorted(str(p.relative_to(e2e.REPO_ROOT)) for p in e2e.CLUSTER.glob("test_*.py") if p != e2e.AUDIT)
    assert sorted(kfp + others) == sorted(modules + e2e.NEEDS_BUILT_PIECES)
    assert all(Path(m).name.startswith("test_kfp_") for m in kfp)


def test_in_each_half_no_module_that_needs_an_image_runs_before_one_that_needs_none() -> None:
    for half in e2e.halves():
        needs = [m not in e2e.NEEDS_BUILT_PIECES and e2e.needs_images(e2e.REPO_ROOT / m) for m in half]
        assert needs == sorted(needs), half  # every False (image-free) before every True


def test_the_modules_that_build_images_are_found_and_the_operators_module_is_not() -> None:
    assert e2e.needs_images(e2e.CLUSTER / "test_real_pods.py")
    assert e2e.needs_images(e2e.CLUSTER / "test_kfp_ui.py")
    assert not e2e.needs_images(e2e.CLUSTER / "test_operators.py")


def test_a_module_that_reaches_an_image_helper_through_another_helper_needs_images(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    (tmp_path / "real_pods.py").write_text("IMAGES = True\n")
    (tmp_path / "jobs.py").write_text("from tests.cluster.real_pods import IMAGES\n")
    (tmp_path / "test_a.py").write_text("import os\nfrom tests.cluster import jobs\n")
    (tmp_path / "test_b.py").write_text("from tests.cluster import contract  # not in this tree\nimport os\n")
    monkeypatch.setattr(e2e, "CLUSTER", tmp_path)
    assert e2e.needs_images(tmp_path / "test_a.py")
    assert not e2e.needs_images(tmp_path / "test_b.py")
