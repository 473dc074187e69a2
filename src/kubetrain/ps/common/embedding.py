"""One shard's part of an embedding table: rows created lazily on first use.

A row's initial value depends only on (seed, table, id), never on which shard creates it or when,
so a row that was never checkpointed comes back identical after a restart, and a table
repartitioned over a different number of shards initialises the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kubetrain.errors import SpecError
from kubetrain.ps.common.optimizers import OptimizerSpec, SlotArrays, new_slots
from kubetrain.ps.common.placement import stable_hash

__all__ = ["EmbeddingTable", "TableConfig", "initial_rows"]

_U64 = np.uint64
_MASK53 = _U64((1 << 53) - 1)


@dataclass(frozen=True)
class TableConfig:
    """An embedding table declared by a model: name, row width and init range (±init_scale)."""

    name: str
    dim: int
    init_scale: float

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("table name", self.name, "a non-empty name")
        if not (isinstance(self.dim, int) and self.dim > 0):
            raise SpecError(f"table {self.name} dim", self.dim, "a positive integer")
        if not self.init_scale >= 0:
            raise SpecError(f"table {self.name} init_scale", self.init_scale, "a number >= 0")


def _splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    # Counter-based hashing: vectorised, and wrap-around uint64 arithmetic is what we want.
    with np.errstate(over="ignore"):
        x = x + _U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
        return x ^ (x >> _U64(31))


def initial_rows(config: TableConfig, seed: int, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """The initial values of rows `ids`: uniform in ±init_scale, a pure function of the id."""
    base = _U64((stable_hash(config.name) ^ (seed * 0x100000001B3)) & 0xFFFFFFFFFFFFFFFF)
    counters = ids.astype(_U64)[:, None] * _U64(config.dim) + np.arange(config.dim, dtype=_U64)
    with np.errstate(over="ignore"):
        bits = _splitmix64(counters + base)
    unit = (bits & _MASK53).astype(np.float64) / float(1 << 53)
    return ((2.0 * unit - 1.0) * config.init_scale).astype(np.float32)


class EmbeddingTable:
    """Rows of one table held by one shard, with their optimizer slots; not thread-safe."""

    def __init__(self, config: TableConfig, optimizer: OptimizerSpec, seed: int) -> None:
        self.config = config
        self.seed = seed
        self._optimizer = optimizer
        self._pos: dict[int, int] = {}
        self._values = np.zeros((0, config.dim), np.float32)
        self._slots: SlotArrays = new_slots(optimizer, (0, config.dim), rows=True)

    def __len__(self) -> int:
        return len(self._pos)

    def _grow(self, extra: int) -> None:
        need = len(self._pos) + extra
        if need <= len(self._values):
            return
        cap = max(need, 2 * len(self._values), 64)

        def grown(a: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
            out = np.zeros((cap, *a.shape[1:]), np.float32)
            out[: len(a)] = a
            return out

        self._values = grown(self._values)
        # Per-row slots grow with the rows; per-table ones (Adam's step count, 0-d) do not.
        self._slots = {k: grown(v) if v.ndim else v for k, v in self._slots.items()}

    def positions(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Row positions of `ids`, creating (and initialising) the rows not seen before."""
        new = [int(i) for i in ids if int(i) not in self._pos]
        if new:
            new = sorted(set(new))
            self._grow(len(new))
            start = len(self._pos)
            self._values[start : start + len(new)] = initial_rows(self.config, self.seed, np.asarray(new, np.int64))
            for k, i in enumerate(new):
                self._pos[i] = start + k
        return np.fromiter((self._pos[int(i)] for i in ids), np.int64, count=len(ids))

    def lookup(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """A copy of the rows of `ids` (created lazily)."""
        pos = self.positions(ids)  # first: creating rows may reallocate the storage
        return self._values[pos].copy()

    @property
    def values(self) -> npt.NDArray[np.float32]:
        """The storage array (rows in creation order; only the first len(self) are in use)."""
        return self._values

    @property
    def slots(self) -> SlotArrays:
        """The optimizer slot arrays, aligned with `values`."""
        return self._slots

    def ids(self) -> npt.NDArray[np.int64]:
        """The ids of all rows, in storage order."""
        out = np.empty(len(self._pos), np.int64)
        for i, p in self._pos.items():
            out[p] = i
        return out

    def export(self) -> dict[str, npt.NDArray[np.float32] | npt.NDArray[np.int64]]:
        """ids, values and slots of the rows in use (for checkpoints and model dumps)."""
        n = len(self._pos)
        out: dict[str, npt.NDArray[np.float32] | npt.NDArray[np.int64]] = {
            "ids": self.ids(),
            "values": self._values[:n].copy(),
        }
        for k, v in self._slots.items():
            out[f"slot_{k}"] = v[:n].copy() if v.ndim else v.copy()
        return out

    def load(
        self,
        ids: npt.NDArray[np.int64],
        values: npt.NDArray[np.float32],
        slots: dict[str, npt.NDArray[np.float32]],
    ) -> None:
        """Replace the content with the given rows (slots missing from `slots` start at zero)."""
        self._pos = {}
        self._values = np.zeros((0, self.config.dim), np.float32)
        self._slots = new_slots(self._optimizer, (0, self.config.dim), rows=True)
        self._grow(len(ids))
        self._values[: len(ids)] = values
        for k, v in self._slots.items():
            if k in slots:
                if v.ndim:
                    v[: len(ids)] = slots[k]
                else:
                    v[...] = slots[k]
        self._pos = {int(i): p for p, i in enumerate(ids)}
