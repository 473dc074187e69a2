"""PyTorch checkpoint payloads: model, optimizer, progress, RNG states and the run's signature.

Payloads hold only tensors and plain Python values, so they load with `weights_only=True` (no
arbitrary unpickling of a file that sits on a shared volume).
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kubetrain.train.checkpoints import CheckpointCorruptError, CheckpointDir, Progress, RunSignature

__all__ = ["load_checkpoint", "restore_rng", "save_checkpoint"]

FORMAT = 1


def _capture_rng() -> dict[str, Any]:
    version, mt_state, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    out: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": version, "state": list(mt_state), "gauss": gauss},
    }
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(rng: dict[str, Any]) -> None:
    """Put back the RNG states captured by :func:`save_checkpoint` (torch, CUDA, numpy, Python)."""
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    n = rng["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = rng["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


def save_checkpoint(
    ckdir: CheckpointDir,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    signature: RunSignature,
) -> Path:
    """Write the checkpoint of `progress.global_step` atomically (rank 0 only)."""
    payload = {
        "format": FORMAT,
        "framework": "torch",
        "signature": signature.to_payload(),
        "progress": progress.to_json(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": _capture_rng(),
    }
    return ckdir.save(progress.global_step, lambda f: torch.save(payload, f))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`; CheckpointCorruptError if unreadable."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, OSError, ValueError) as e:
        raise CheckpointCorruptError(f"{path}: cannot load: {e}") from e
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointCorruptError(f"{path}: not a kubetrain torch checkpoint (format {FORMAT})")
    missing = {"signature", "progress", "model", "optimizer", "rng"} - set(payload)
    if missing:
        raise CheckpointCorruptError(f"{path}: missing {sorted(missing)}")
    return payload
