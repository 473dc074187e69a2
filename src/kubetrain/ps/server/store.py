"""The parameters one PS shard holds, and how gradients are applied to them.

Async mode (ElasticDL's Go PS): a push is applied on arrival and the version goes up by one;
with `lr_staleness_modulation` (off by default) its learning rate is divided by its staleness
(versions since the pull). Off, because the staleness a push sees is set by how the processes are
scheduled, not by the data: on a loaded machine it grows, the effective learning rate falls and
five epochs of the digits ended anywhere from 0.947 to 0.967 (stress-ng --cpu 4 beside the run);
with every gradient at the full Adam rate 18 such runs ended at 0.958-0.967, though a tail
below 0.95 remained; ten epochs (the components' default) ended at 0.969-0.972 (docs/testing.md).
Sync mode (ElasticDL's Python PS): pushes computed from the current version are summed until
`grads_to_wait` have arrived, then their mean is applied and the version goes up by one; a push
computed from an older version is rejected and the worker recomputes it from fresh parameters.
Every push also names the shard generation it pulled from, so gradients computed against a
shard that has since restarted are rejected rather than applied to restored parameters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kubetrain.errors import SpecError
from kubetrain.ps.common.embedding import EmbeddingTable, TableConfig
from kubetrain.ps.common.optimizers import OptimizerSpec, SlotArrays, apply_dense, apply_rows, new_slots
from kubetrain.ps.common.tasks import MODES

__all__ = ["ParameterShard", "PushResult", "ShardConfig", "ShardSnapshot"]


F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ShardConfig:
    """How one shard behaves."""

    shard_index: int
    num_shards: int
    mode: str = "async"
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    grads_to_wait: int = 1
    lr_staleness_modulation: bool = False
    lr_half_life: int = 0  # versions over which the learning rate halves (0: constant)

    def __post_init__(self) -> None:
        if not (isinstance(self.num_shards, int) and self.num_shards >= 1):
            raise SpecError("num_shards", self.num_shards, "an integer >= 1")
        if not (isinstance(self.shard_index, int) and 0 <= self.shard_index < self.num_shards):
            raise SpecError("shard_index", self.shard_index, f"an integer in [0, {self.num_shards})")
        if self.mode not in MODES:
            raise SpecError("mode", self.mode, f"one of {list(MODES)}")
        if not (isinstance(self.grads_to_wait, int) and self.grads_to_wait >= 1):
            raise SpecError("grads_to_wait", self.grads_to_wait, "an integer >= 1")
        if not (isinstance(self.lr_half_life, int) and self.lr_half_life >= 0):
            raise SpecError("lr_half_life", self.lr_half_life, "an integer >= 0 (0: constant lr)")

    def lr_at(self, version: int) -> float:
        """The learning rate at a shard version (exponential decay by half-life, if set)."""
        if not self.lr_half_life:
            return self.optimizer.lr
        return float(self.optimizer.lr * 0.5 ** (version / self.lr_half_life))


@dataclass(frozen=True)
class PushResult:
    """The answer to one push."""

    accepted: bool
    applied_version: int
    reject_reason: str = ""


@dataclass(frozen=True)
class ShardSnapshot:
    """Everything a checkpoint holds: version, seed, dense tensors, tables, optimizer slots."""

    version: int
    seed: int
    dense: Mapping[str, F32]
    dense_slots: Mapping[str, SlotArrays]
    tables: Mapping[str, TableConfig]
    rows: Mapping[str, Mapping[str, npt.NDArray[np.float32] | I64]]


class _Aggregate:
    """Sync mode: gradients summed for the next version."""

    def __init__(self) -> None:
        self.count = 0
        self.dense: dict[str, F32] = {}
        self.rows: dict[str, dict[int, F32]] = {}

    def add(self, dense: Mapping[str, F32], sparse: Mapping[str, tuple[I64, F32]]) -> None:
        self.count += 1
        for name, g in dense.items():
            if name in self.dense:
                self.dense[name] += g
            else:
                self.dense[name] = g.copy()
        for table, (ids, values) in sparse.items():
            acc = self.rows.setdefault(table, {})
            for i, row in zip(ids.tolist(), values, strict=True):
                if i in acc:
                    acc[i] += row
                else:
                    acc[i] = row.copy()


class ParameterShard:
    """Dense parameters and embedding rows of one shard; every method is thread-safe."""

    def __init__(
        self,
        config: ShardConfig,
        *,
        on_version: Callable[[ParameterShard], None] | None = None,
    ) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._on_version = on_version
        self.version = 0
        self.seed = 0
        self.initialized = False
        self._dense: dict[str, F32] = {}
        self._dense_slots: dict[str, SlotArrays] = {}
        self._tables: dict[str, EmbeddingTable] = {}
        self._pending = _Aggregate()

    def init_model(self, dense: Mapping[str, F32], tables: Sequence[TableConfig], seed: int) -> bool:
        """Take the initial parameters if none are set yet; True if this call set them."""
        with self._lock:
            if self.initialized:
                # Tables may be declared late (a model with tables on a shard with no dense).
                for t in tables:
                    self._tables.setdefault(t.name, EmbeddingTable(t, self.config.optimizer, self.seed))
                return False
            opt = self.config.optimizer
            self.seed = seed
            self._dense = {k: np.array(v, np.float32) for k, v in dense.items()}
            self._dense_slots = {k: new_slots(opt, v.shape) for k, v in self._dense.items()}
            self._tables = {t.name: EmbeddingTable(t, opt, seed) for t in tables}
            self.initialized = True
            return True

    def pull(self, *, dense: bool, lookups: Mapping[str, I64]) -> tuple[int, dict[str, F32], dict[str, F32]]:
        """(version, dense copies if asked, rows per table for the given unique ids)."""
        with self._lock:
            dense_out = {k: v.copy() for k, v in self._dense.items()} if dense else {}
            rows = {name: self._table(name).lookup(ids) for name, ids in lookups.items()}
            return self.version, dense_out, rows

    def _table(self, name: str) -> EmbeddingTable:
        try:
            return self._tables[name]
        except KeyError:
            raise SpecError("embedding table", name, f"one of {sorted(self._tables)} (declared at init)") from None

    def _check_grads(self, dense: Mapping[str, F32], sparse: Mapping[str, tuple[I64, F32]]) -> None:
        for name, g in dense.items():
            if name not in self._dense:
                raise SpecError("dense gradient", name, f"one of {sorted(self._dense)}")
            if g.shape != self._dense[name].shape:
                raise SpecError(f"gradient {name} shape", g.shape, str(self._dense[name].shape))
        for table, (ids, values) in sparse.items():
            dim = self._table(table).config.dim
            if values.shape != (len(ids), dim):
                raise SpecError(f"gradient rows of {table} shape", values.shape, f"(n, {dim})")

    def push(
        self,
        *,
        version: int,
        dense: Mapping[str, F32],
        sparse: Mapping[str, tuple[I64, F32]],
    ) -> PushResult:
        """Apply (async) or aggregate (sync) one worker's gradients computed at `version`."""
        with self._lock:
            if not self.initialized:
                return PushResult(False, self.version, "not initialized")
            if not 0 <= version <= self.version:
                # A version the shard never had: the push was not computed from its parameters.
                raise SpecError("version", version, f"a version this shard has had (0..{self.version})")
            self._check_grads(dense, sparse)
            if self.config.mode == "async":
                # ElasticDL's modulation: lr / max(1, versions applied since the pull).
                staleness = max(1, self.version - version)
                scale = 1.0 / staleness if self.config.lr_staleness_modulation else 1.0
                self._apply(dense, sparse, self.config.lr_at(self.version) * scale)
                self._bump()
                return PushResult(True, self.version)
            if version != self.version:
                return PushResult(False, self.version, f"stale: computed at {version}, shard at {self.version}")
            self._pending.add(dense, sparse)
            landing = self.version + 1
            if self._pending.count >= self.config.grads_to_wait:
                self._apply_pending()
            return PushResult(True, landing)

    def flush(self) -> int:
        """Sync mode: apply a partly filled aggregate now; returns the version."""
        with self._lock:
            if self._pending.count:
                self._apply_pending()
            return self.version

    def _apply_pending(self) -> None:
        agg, self._pending = self._pending, _Aggregate()
        inv = np.float32(1.0 / agg.count)
        dense = {k: v * inv for k, v in agg.dense.items()}
        sparse = {}
        for table, rows in agg.rows.items():
            ids = np.fromiter(rows.keys(), np.int64, count=len(rows))
            sparse[table] = (ids, np.stack(list(rows.values())) * inv)
        self._apply(dense, sparse, self.config.lr_at(self.version))
        self._bump()

    def _apply(self, dense: Mapping[str, F32], sparse: Mapping[str, tuple[I64, F32]], lr: float) -> None:
        opt = self.config.optimizer
        for name, g in dense.items():
            apply_dense(opt, self._dense[name], g, self._dense_slots[name], lr)
        for table, (ids, values) in sparse.items():
            if len(ids) == 0:
                continue
            t = self._table(table)
            # Merge duplicate ids so each row moves once per push (workers dedup already).
            uniq, inverse = np.unique(ids, return_inverse=True)
            merged = np.zeros((len(uniq), values.shape[1]), np.float32)
            np.add.at(merged, inverse, values)
            rows = t.positions(uniq)  # first: creating rows may reallocate the storage
            apply_rows(opt, t.values, rows, merged, t.slots, lr)

    def _bump(self) -> None:
        self.version += 1
        if self._on_version is not None:
            self._on_version(self)

    def snapshot(self) -> ShardSnapshot:
        """A consistent copy of everything (for a checkpoint or the final model)."""
        with self._lock:
            return ShardSnapshot(
                version=self.version,
                seed=self.seed,
                dense={k: v.copy() for k, v in self._dense.items()},
                dense_slots={k: {s: a.copy() for s, a in slots.items()} for k, slots in self._dense_slots.items()},
                tables={k: t.config for k, t in self._tables.items()},
                rows={k: t.export() for k, t in self._tables.items()},
            )

    def restore(self, snap: ShardSnapshot) -> None:
        """Replace everything with a snapshot's content (the shard counts as initialised)."""
        with self._lock:
            opt = self.config.optimizer
            self.version = snap.version
            self.seed = snap.seed
            self._dense = {k: np.array(v, np.float32) for k, v in snap.dense.items()}
            self._dense_slots = {}
            for k, v in self._dense.items():
                slots = new_slots(opt, v.shape)
                for s in slots:
                    if s in snap.dense_slots.get(k, {}):
                        slots[s][...] = snap.dense_slots[k][s]
                self._dense_slots[k] = slots
            self._tables = {}
            for name, cfg in snap.tables.items():
                table = EmbeddingTable(cfg, opt, snap.seed)
                data = snap.rows.get(name, {})
                if "ids" in data:
                    table.load(
                        np.asarray(data["ids"], np.int64),
                        np.asarray(data["values"], np.float32),
                        {
                            k.removeprefix("slot_"): np.asarray(v, np.float32)
                            for k, v in data.items()
                            if k.startswith("slot_")
                        },
                    )
                self._tables[name] = table
            self._pending = _Aggregate()
            self.initialized = True
