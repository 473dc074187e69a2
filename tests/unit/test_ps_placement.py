"""Parameter placement is stable across processes and splits ids by id modulo P."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from kubetrain.ps.common.placement import dense_owner, partition_dense, split_ids, stable_hash
from kubetrain.ps.common.tensors import from_rows, from_tensor, to_rows, to_tensor

NAMES = [f"layer{i}.{kind}" for i in range(6) for kind in ("weight", "bias")]


def test_placement_is_the_same_in_processes_with_different_hash_seeds() -> None:
    code = f"from kubetrain.ps.common.placement import partition_dense;print(partition_dense({NAMES!r}, 3))"
    outs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(
            subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
        )
    assert len(outs) == 1
    assert outs.pop().strip() == str(partition_dense(NAMES, 3))


def test_dense_owner_matches_partition_and_spreads_names() -> None:
    groups = partition_dense(NAMES, 3)
    assert sorted(n for g in groups for n in g) == sorted(NAMES)
    for shard, group in enumerate(groups):
        assert all(dense_owner(n, 3) == shard for n in group)
    assert sum(1 for g in groups if g) >= 2  # 12 names do not all hash to one shard
    assert stable_hash("a") != stable_hash("b")


def test_split_ids_deduplicates_and_groups_by_modulo() -> None:
    ids = np.array([7, 3, 7, 10, 4, 3, 0], np.int64)
    groups = split_ids(ids, 3)
    assert [g.tolist() for g in groups] == [[0, 3], [4, 7, 10], []]


def test_tensor_and_rows_round_trip() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(from_tensor(to_tensor("w", a)), a)
    ids, values = from_rows(to_rows("t", np.array([5, 9]), a[:2]))
    assert ids.tolist() == [5, 9]
    assert np.array_equal(values, a[:2])
