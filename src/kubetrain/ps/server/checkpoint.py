"""Per-shard checkpoints on the shared volume, and the shard's generation record.

Layout under the job's checkpoint dir (one sub-dir per shard, as ElasticDL's
`version-N/variables-i-of-N`, but grouped by shard since shard versions drift apart)::

    shard-00000-of-00002/version-0000000100.npz
    shard-00000-of-00002/generations.json        # restored version of each start, in order

Files are written under a temporary name, fsynced and renamed, so a crash mid-write leaves the
previous checkpoint intact; a checkpoint that fails to load is skipped for the one before it.
A shard started with a shard count that has no checkpoints of its own takes its rows and dense
tensors from the newest checkpoints of another shard count (repartitioning, as ElasticDL
designed), so the parameter-server count can change between runs.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kubetrain.fileio import atomic_write_bytes
from kubetrain.ps.common.embedding import TableConfig
from kubetrain.ps.common.errors import CheckpointError
from kubetrain.ps.common.placement import dense_owner
from kubetrain.ps.server.store import ShardSnapshot

__all__ = [
    "latest_snapshot",
    "load_snapshot",
    "record_generation",
    "save_snapshot",
    "shard_dir",
]

_CKPT_RE = re.compile(r"^version-(\d{10})\.npz$")
_DIR_RE = re.compile(r"^shard-(\d{5})-of-(\d{5})$")
GENERATIONS = "generations.json"


def shard_dir(root: str | os.PathLike[str], shard_index: int, num_shards: int) -> Path:
    """The checkpoint sub-dir of one shard."""
    return Path(root) / f"shard-{shard_index:05d}-of-{num_shards:05d}"


def save_snapshot(directory: Path, snap: ShardSnapshot, *, keep: int = 3) -> Path:
    """Write `snap` as `version-N.npz` in `directory`, keeping the newest `keep` checkpoints."""
    arrays: dict[str, npt.NDArray[Any]] = {}
    meta = {
        "version": snap.version,
        "seed": snap.seed,
        "tables": {k: {"dim": c.dim, "init_scale": c.init_scale} for k, c in snap.tables.items()},
        "dense": list(snap.dense),
    }
    arrays["meta"] = np.array(json.dumps(meta))
    for i, (name, value) in enumerate(snap.dense.items()):
        arrays[f"dense/{i}"] = value
        for slot, a in snap.dense_slots.get(name, {}).items():
            arrays[f"dense_slot/{i}/{slot}"] = a
    for t, data in enumerate(snap.rows.values()):
        for key, col in data.items():
            arrays[f"rows/{t}/{key}"] = col
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path = directory / f"version-{snap.version:010d}.npz"
    try:
        atomic_write_bytes(path, buf.getvalue())
        for old in _checkpoints(directory)[:-keep]:
            old.unlink(missing_ok=True)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot write checkpoint: {e}") from e
    return path


def load_snapshot(path: Path) -> ShardSnapshot:
    """Read one checkpoint file; CheckpointError if it is unreadable or malformed."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            dense_names: list[str] = meta["dense"]
            dense = {n: np.asarray(z[f"dense/{i}"]) for i, n in enumerate(dense_names)}
            slots: dict[str, dict[str, npt.NDArray[np.float32]]] = {}
            rows: dict[str, dict[str, npt.NDArray[Any]]] = {}
            table_names = list(meta["tables"])
            for key in z.files:
                parts = key.split("/")
                if parts[0] == "dense_slot":
                    slots.setdefault(dense_names[int(parts[1])], {})[parts[2]] = z[key]
                elif parts[0] == "rows":
                    rows.setdefault(table_names[int(parts[1])], {})[parts[2]] = z[key]
            tables = {
                k: TableConfig(name=k, dim=int(v["dim"]), init_scale=float(v["init_scale"]))
                for k, v in meta["tables"].items()
            }
            return ShardSnapshot(
                version=int(meta["version"]),
                seed=int(meta["seed"]),
                dense=dense,
                dense_slots=slots,
                tables=tables,
                rows=rows,
            )
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise CheckpointError(f"{path}: unreadable checkpoint: {e}") from e


def _checkpoints(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _CKPT_RE.match(p.name)]
    return sorted(found, key=lambda p: p.name)


def _newest_loadable(directory: Path) -> ShardSnapshot | None:
    for path in reversed(_checkpoints(directory)):
        try:
            return load_snapshot(path)
        except CheckpointError:
            continue  # a damaged newest file: fall back to the one before it
    return None


def _repartition(root: Path, shard_index: int, num_shards: int) -> ShardSnapshot | None:
    """This shard's part of the newest checkpoints written under another shard count."""
    layouts: dict[int, list[Path]] = {}
    for d in root.iterdir() if root.is_dir() else []:
        m = _DIR_RE.match(d.name)
        if m and int(m.group(2)) != num_shards and _checkpoints(d):
            layouts.setdefault(int(m.group(2)), []).append(d)
    if not layouts:
        return None
    # The layout with the most recent checkpoint file wins.
    count, dirs = max(layouts.items(), key=lambda kv: max(_checkpoints(d)[-1].stat().st_mtime for d in kv[1]))
    del count
    snaps = [s for s in (_newest_loadable(d) for d in dirs) if s is not None]
    if not snaps:
        return None
    dense: dict[str, npt.NDArray[np.float32]] = {}
    dense_slots: dict[str, dict[str, npt.NDArray[np.float32]]] = {}
    tables: dict[str, TableConfig] = {}
    rows: dict[str, dict[str, npt.NDArray[Any]]] = {}
    for s in snaps:
        for name, value in s.dense.items():
            if dense_owner(name, num_shards) == shard_index:
                dense[name] = value
                dense_slots[name] = dict(s.dense_slots.get(name, {}))
        tables.update(s.tables)
        for table, data in s.rows.items():
            ids = np.asarray(data["ids"], np.int64)
            keep = (ids % num_shards) == shard_index
            part = rows.setdefault(table, {})
            for key, a in data.items():
                arr = np.asarray(a)
                if arr.ndim == 0:  # a per-table step count: the furthest one carries on
                    part[key] = arr if key not in part else np.maximum(part[key], arr)
                    continue
                piece = arr[keep]
                part[key] = piece if key not in part else np.concatenate([part[key], piece])
    return ShardSnapshot(
        version=max(s.version for s in snaps),
        seed=snaps[0].seed,
        dense=dense,
        dense_slots=dense_slots,
        tables=tables,
        rows=rows,
    )


def latest_snapshot(root: str | os.PathLike[str], shard_index: int, num_shards: int) -> ShardSnapshot | None:
    """The newest loadable checkpoint of this shard, else a repartitioned one, else None."""
    own = _newest_loadable(shard_dir(root, shard_index, num_shards))
    if own is not None:
        return own
    return _repartition(Path(root), shard_index, num_shards)


def record_generation(directory: Path, restored_version: int) -> list[int]:
    """Append this start's restored version to the shard's record; return the whole record.

    The record's length is the generation number of this start (1 for the first).
    """
    path = directory / GENERATIONS
    history: list[int] = []
    try:
        if path.exists():
            raw = json.loads(path.read_text(encoding="utf-8"))
            history = [int(v) for v in raw["restored_versions"]]
        history.append(int(restored_version))
        atomic_write_bytes(path, json.dumps({"restored_versions": history}).encode() + b"\n")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: cannot read or write the generation record: {e}") from e
    return history
