"""Runs that start at once on one workspace claim: each gets the data set, none fails.

Found in the e2e tier (2026-11-30): the KFP backend module starts its runs side by side, and on a
fresh claim its `download_dataset` steps of one source wrote the same directory at once, with
nothing between one writer's check of the target and its rename onto it, and a step failed. A
sweep of N runs started together on a new claim is what a user does, so these tests start real
processes together, released by one barrier.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np

from kubetrain.data.dataset_format import read_dataset_info
from kubetrain.data.dataset_writer import write_dataset
from kubetrain.errors import DataError
from kubetrain.kfp_runtime.download_step import download_dataset_step
from tests.unit.fake_kfp_artifact import FakeArtifact

WRITERS = 6


def _download(barrier: Any, root: str, artifact: str, refresh: bool, results: Any) -> None:
    os.environ["KUBETRAIN_BACKEND"] = "local"
    os.environ["KUBETRAIN_LOCAL_ROOT"] = root
    barrier.wait()
    try:
        meta = download_dataset_step(
            source="builtin:digits", sha256="", shards=2, workspace_pvc="ws", refresh=refresh,
            dataset=FakeArtifact(Path(artifact)),
        )  # fmt: skip
        results.put(("ok", meta["path"], meta["reused"]))
    except SystemExit as e:  # the step's own exit code, as the launcher would see it
        results.put(("exit", e.code, None))


def _write(barrier: Any, out: str, seed: int, results: Any) -> None:
    x = np.random.default_rng(seed).normal(size=(40, 1, 2, 2)).astype(np.float32)
    y = np.arange(40) % 4
    barrier.wait()
    try:
        write_dataset(out, name=f"writer-{seed}", x_train=x, y_train=y, x_test=x[:8], y_test=y[:8], num_classes=4,
                      shards=2, normalization={"scale": 1.0, "mean": 0.0, "std": 1.0}, source="test")  # fmt: skip
        results.put(("ok", seed, None))
    except (OSError, DataError) as e:
        results.put(("error", repr(e), None))


def _together(target: Any, args_of: list[tuple[Any, ...]]) -> list[tuple[Any, Any, Any]]:
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(len(args_of)), ctx.Queue()
    procs = [ctx.Process(target=target, args=(barrier, *args, results)) for args in args_of]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return outcomes


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_runs_started_together_on_a_new_claim_download_once_and_all_succeed(tmp_path: Path) -> None:
    root = tmp_path / "local"
    outcomes = _together(_download, [(str(root), str(tmp_path / f"artifact-{i}"), False) for i in range(WRITERS)])
    assert all(kind == "ok" for kind, _, _ in outcomes), outcomes
    assert len({path for _, path, _ in outcomes}) == 1
    # One fetched it; the others waited for it and reused it rather than writing it again.
    assert sorted(reused for _, _, reused in outcomes) == [False] + [True] * (WRITERS - 1), outcomes
    datasets = root / "claims" / "ws" / "datasets"
    assert _leftovers(datasets) == []  # no temporary copy, and no lock file once every turn is over
    info = read_dataset_info(next(p for p in datasets.iterdir() if not p.name.startswith(".")))
    assert info.num_records("train") == 1438


def test_refreshes_started_together_all_succeed_and_leave_one_complete_copy(tmp_path: Path) -> None:
    root = tmp_path / "local"
    outcomes = _together(_download, [(str(root), str(tmp_path / f"artifact-{i}"), True) for i in range(WRITERS)])
    assert all(kind == "ok" and reused is False for kind, _, reused in outcomes), outcomes
    datasets = root / "claims" / "ws" / "datasets"
    [directory] = [p for p in datasets.iterdir() if not p.name.startswith(".")]
    assert read_dataset_info(directory).num_records("train") == 1438
    assert _leftovers(datasets) == []


def test_writers_of_one_directory_at_once_all_succeed_and_the_last_copy_is_whole(tmp_path: Path) -> None:
    """`kubetrain download --out DIR` twice at once: the writers take turns, and the last copy stands, whole."""
    out = tmp_path / "data"
    outcomes = _together(_write, [(str(out), seed) for seed in range(WRITERS)])
    assert all(kind == "ok" for kind, _, _ in outcomes), outcomes
    info = read_dataset_info(out)
    assert info.name in {f"writer-{seed}" for seed in range(WRITERS)}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["dataset.json", *(s.file for s in info.shards("train")), *(s.file for s in info.shards("test"))]
    )
    assert _leftovers(tmp_path) == []
