"""PS shard semantics: optimizers, async staleness, sync aggregation, lazy rows, checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch

from kubetrain.errors import SpecError
from kubetrain.ps.common.embedding import TableConfig, initial_rows
from kubetrain.ps.common.optimizers import OptimizerSpec
from kubetrain.ps.server.checkpoint import latest_snapshot, record_generation, save_snapshot, shard_dir
from kubetrain.ps.server.store import ParameterShard, ShardConfig

TABLE = TableConfig("emb", 3, 0.1)


def _shard(
    mode: str = "async",
    opt: str = "sgd",
    lr: float = 0.1,
    k: int = 1,
    index: int = 0,
    n: int = 1,
    modulation: bool = False,
) -> ParameterShard:
    optimizer = OptimizerSpec(name=opt, lr=lr)
    config = ShardConfig(index, n, mode=mode, optimizer=optimizer, grads_to_wait=k, lr_staleness_modulation=modulation)
    s = ParameterShard(config)
    s.init_model({"w": np.ones((2, 2), np.float32)}, [TABLE], seed=7)
    return s


def _g(value: float) -> dict[str, npt.NDArray[np.float32]]:
    return {"w": np.full((2, 2), value, np.float32)}


def test_first_init_wins() -> None:
    s = _shard()
    assert not s.init_model({"w": np.zeros((2, 2), np.float32)}, [TABLE], seed=1)
    assert np.array_equal(s.pull(dense=True, lookups={})[1]["w"], np.ones((2, 2)))


def test_async_applies_every_gradient_on_arrival_at_the_full_rate_by_default() -> None:
    s = _shard(lr=0.1)
    s.push(version=0, dense=_g(0.0), sparse={})  # version 1
    s.push(version=1, dense=_g(0.0), sparse={})  # version 2
    s.push(version=0, dense=_g(1.0), sparse={})  # staleness 2, applied as if fresh
    assert np.allclose(s.pull(dense=True, lookups={})[1]["w"], 0.9)
    assert s.version == 3


def test_async_with_staleness_modulation_scales_the_lr_by_staleness() -> None:
    s = _shard(lr=0.1, modulation=True)
    assert s.push(version=0, dense=_g(1.0), sparse={}).applied_version == 1  # fresh: full lr
    assert np.allclose(s.pull(dense=True, lookups={})[1]["w"], 0.9)
    s.push(version=1, dense=_g(0.0), sparse={})  # version 2
    s.push(version=2, dense=_g(0.0), sparse={})  # version 3
    # Computed at version 0, applied at 3: staleness 3, so lr / 3.
    s.push(version=0, dense=_g(3.0), sparse={})
    assert np.allclose(s.pull(dense=True, lookups={})[1]["w"], 0.9 - 0.1)
    assert s.version == 4


def test_sync_aggregates_k_gradients_and_rejects_stale_ones() -> None:
    s = _shard(mode="sync", lr=1.0, k=2)
    r1 = s.push(version=0, dense=_g(1.0), sparse={})
    assert (r1.accepted, r1.applied_version, s.version) == (True, 1, 0)
    s.push(version=0, dense=_g(3.0), sparse={})
    assert s.version == 1
    assert np.allclose(s.pull(dense=True, lookups={})[1]["w"], 1 - 2.0)  # mean of 1 and 3
    stale = s.push(version=0, dense=_g(1.0), sparse={})
    assert not stale.accepted and stale.reject_reason.startswith("stale")


def test_sync_flush_applies_a_partial_aggregate() -> None:
    s = _shard(mode="sync", lr=1.0, k=3)
    s.push(version=0, dense=_g(2.0), sparse={})
    assert s.flush() == 1
    assert np.allclose(s.pull(dense=True, lookups={})[1]["w"], -1.0)


def test_rows_are_created_lazily_and_deterministically() -> None:
    a, b = _shard(), _shard()
    rows_a = a.pull(dense=False, lookups={"emb": np.array([5, 1], np.int64)})[2]["emb"]
    rows_b = b.pull(dense=False, lookups={"emb": np.array([1, 5], np.int64)})[2]["emb"]
    assert np.array_equal(rows_a, rows_b[::-1])
    assert np.array_equal(rows_a, initial_rows(TABLE, 7, np.array([5, 1])))
    assert np.abs(rows_a).max() <= 0.1 and len(np.unique(rows_a)) == rows_a.size


def test_sparse_push_merges_duplicate_ids_and_grows_storage() -> None:
    s = _shard(lr=1.0)
    ids = np.arange(200, dtype=np.int64)  # more rows than the initial capacity
    before = s.pull(dense=False, lookups={"emb": ids})[2]["emb"]
    grads = np.ones((3, 3), np.float32)
    s.push(version=0, dense={}, sparse={"emb": (np.array([4, 4, 250]), grads)})
    after = s.pull(dense=False, lookups={"emb": np.array([4, 5, 250], np.int64)})[2]["emb"]
    assert np.allclose(after[0], before[4] - 2.0)
    assert np.allclose(after[1], before[5])
    assert np.allclose(after[2], initial_rows(TABLE, 7, np.array([250]))[0] - 1.0)


def test_bad_gradients_name_the_problem() -> None:
    s = _shard()
    with pytest.raises(SpecError, match="dense gradient"):
        s.push(version=0, dense={"nope": np.zeros(1, np.float32)}, sparse={})
    with pytest.raises(SpecError, match="shape"):
        s.push(version=0, dense={"w": np.zeros(3, np.float32)}, sparse={})
    with pytest.raises(SpecError, match="embedding table"):
        s.pull(dense=False, lookups={"other": np.array([1])})


def test_dense_adam_matches_torch() -> None:
    s = _shard(opt="adam", lr=0.01)
    p = torch.nn.Parameter(torch.ones(2, 2))
    opt = torch.optim.Adam([p], lr=0.01)
    rng = np.random.default_rng(0)
    for v in range(5):
        g = rng.normal(size=(2, 2)).astype(np.float32)
        s.push(version=v, dense={"w": g}, sparse={})
        p.grad = torch.from_numpy(g)
        opt.step()
    assert np.allclose(s.pull(dense=True, lookups={})[1]["w"], p.detach().numpy(), atol=1e-6)


def test_sparse_adam_is_lazy_like_torch_sparse_adam() -> None:
    s = _shard(opt="adam", lr=0.01)
    ids = np.arange(4, dtype=np.int64)
    init = s.pull(dense=False, lookups={"emb": ids})[2]["emb"]
    emb = torch.nn.Embedding(4, 3, sparse=True)
    emb.weight.data.copy_(torch.from_numpy(init))
    opt = torch.optim.SparseAdam(emb.parameters(), lr=0.01)
    rng = np.random.default_rng(1)
    for v, touched in enumerate(([0, 1], [1, 2], [1])):
        t_ids = np.array(touched, np.int64)
        g = rng.normal(size=(len(t_ids), 3)).astype(np.float32)
        s.push(version=v, dense={}, sparse={"emb": (t_ids, g)})
        opt.zero_grad()
        emb.weight.grad = torch.sparse_coo_tensor(
            torch.from_numpy(t_ids)[None], torch.from_numpy(g), (4, 3), check_invariants=True
        )
        opt.step()
    got = s.pull(dense=False, lookups={"emb": ids})[2]["emb"]
    assert np.allclose(got, emb.weight.detach().numpy(), atol=1e-6)
    assert np.array_equal(got[3], init[3])  # never touched, never moved


def test_checkpoint_round_trip_with_optimizer_state(tmp_path: Path) -> None:
    s = _shard(opt="adam", lr=0.01)
    s.pull(dense=False, lookups={"emb": np.array([2, 9], np.int64)})
    s.push(version=0, dense=_g(1.0), sparse={"emb": (np.array([9]), np.ones((1, 3), np.float32))})
    save_snapshot(shard_dir(tmp_path, 0, 1), s.snapshot())
    restored = ParameterShard(s.config)
    snap = latest_snapshot(tmp_path, 0, 1)
    assert snap is not None
    restored.restore(snap)
    for shard in (s, restored):  # the same next step from both: optimizer slots came back too
        shard.push(version=1, dense=_g(0.5), sparse={"emb": (np.array([9]), np.ones((1, 3), np.float32))})
    a, b = (x.pull(dense=True, lookups={"emb": np.array([2, 9, 11], np.int64)}) for x in (s, restored))
    assert a[0] == b[0] == 2
    assert np.array_equal(a[1]["w"], b[1]["w"])
    assert np.array_equal(a[2]["emb"], b[2]["emb"])


def test_damaged_newest_checkpoint_falls_back_and_keeps_three(tmp_path: Path) -> None:
    s = _shard()
    d = shard_dir(tmp_path, 0, 1)
    for v in range(5):
        s.push(version=v, dense=_g(1.0), sparse={})
        save_snapshot(d, s.snapshot())
    assert len(list(d.glob("version-*.npz"))) == 3
    (d / "version-0000000005.npz").write_bytes(b"garbage")
    snap = latest_snapshot(tmp_path, 0, 1)
    assert snap is not None and snap.version == 4


def test_repartition_from_two_shards_to_three(tmp_path: Path) -> None:
    old = [_shard(opt="adam", index=i, n=2) for i in range(2)]
    ids = np.arange(30, dtype=np.int64)
    for i, s in enumerate(old):
        s.init_model({}, [TABLE], seed=7)
        s.pull(dense=False, lookups={"emb": ids[ids % 2 == i]})
        s.push(version=0, dense={}, sparse={"emb": (ids[ids % 2 == i], np.ones((15, 3), np.float32))})
        save_snapshot(shard_dir(tmp_path, i, 2), s.snapshot())
    seen = []
    for i in range(3):
        snap = latest_snapshot(tmp_path, i, 3)
        assert snap is not None
        got = np.asarray(snap.rows["emb"]["ids"], np.int64)
        assert (got % 3 == i).all()
        assert int(snap.rows["emb"]["slot_t"]) == 1  # Adam's step count carried over
        seen.extend(got.tolist())
    assert sorted(seen) == ids.tolist()


def test_generation_record_counts_starts(tmp_path: Path) -> None:
    assert record_generation(tmp_path, -1) == [-1]
    assert record_generation(tmp_path, 40) == [-1, 40]
