"""Where each parameter lives: dense tensors by a stable hash of their name, rows by id modulo P.

Python's built-in `hash()` of a str is salted per process, so two workers would disagree; the
placement uses sha256 of the UTF-8 name (as ElasticDL does), stable across processes and runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = ["dense_owner", "partition_dense", "row_owner", "split_ids", "stable_hash"]


def stable_hash(name: str) -> int:
    """A 64-bit hash of `name` that is the same in every process and on every machine."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")


def dense_owner(name: str, num_shards: int) -> int:
    """The shard that holds dense parameter `name`."""
    return stable_hash(name) % num_shards


def partition_dense(names: Iterable[str], num_shards: int) -> list[list[str]]:
    """Dense parameter names grouped by owning shard (index = shard), in the given order."""
    out: list[list[str]] = [[] for _ in range(num_shards)]
    for name in names:
        out[dense_owner(name, num_shards)].append(name)
    return out


def row_owner(ids: npt.NDArray[np.int64], num_shards: int) -> npt.NDArray[np.int64]:
    """The shard of each embedding row id (`id % num_shards`; ids are non-negative)."""
    return np.mod(ids, num_shards)


def split_ids(ids: npt.NDArray[np.int64], num_shards: int) -> list[npt.NDArray[np.int64]]:
    """Unique ids grouped by owning shard (index = shard); each group sorted."""
    unique = np.unique(ids)
    owners = row_owner(unique, num_shards)
    return [unique[owners == s] for s in range(num_shards)]
