"""Chainer checkpoints: model and optimizer in Chainer's npz layout plus progress, RNG and signature.

One `.npz` per checkpoint: `model/...` and `optimizer/...` come from Chainer's serializers (so
`chainer.serializers.load_npz(path, model, path="model/")` reads it too), `_kubetrain/...` holds
the rest as plain arrays; nothing is pickled.
"""

from __future__ import annotations

import json
import random
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kubetrain.train import chainer_models  # sets SETUPTOOLS_USE_DISTUTILS before chainer
from kubetrain.train.checkpoints import (
    CheckpointCorruptError,
    CheckpointDir,
    Progress,
    RunSignature,
)

__all__ = ["ChainerCheckpoint", "load_checkpoint", "save_checkpoint"]

chainer = chainer_models.chainer
_META = "_kubetrain/"
FORMAT = 1


@dataclass(frozen=True)
class ChainerCheckpoint:
    """A checkpoint read back: progress and signature now, model/optimizer state on `restore`."""

    path: Path
    progress: Progress
    signature: dict[str, Any]

    def restore(self, *, model: Any, optimizer: Any) -> None:
        """Load model parameters, optimizer state and the RNG states into the live objects."""
        with np.load(self.path, allow_pickle=False) as npz:
            chainer.serializers.NpzDeserializer(npz, path="model/").load(model)
            chainer.serializers.NpzDeserializer(npz, path="optimizer/").load(optimizer)
            np.random.set_state(
                (
                    str(npz[_META + "np_name"]),
                    npz[_META + "np_keys"].astype(np.uint32),
                    int(npz[_META + "np_pos"]),
                    int(npz[_META + "np_has_gauss"]),
                    float(npz[_META + "np_cached"]),
                )
            )
            py = json.loads(str(npz[_META + "py_random"]))
            random.setstate((py[0], tuple(py[1]), py[2]))


def save_checkpoint(
    ckdir: CheckpointDir,
    *,
    model: Any,
    optimizer: Any,
    progress: Progress,
    signature: RunSignature,
) -> Path:
    """Write the checkpoint of `progress.global_step` atomically (rank 0 only)."""
    s = chainer.serializers.DictionarySerializer()
    s["model"].save(model)
    # A multi-node optimizer forwards `serialize` to the optimizer it wraps (Adam's moments, t).
    s["optimizer"].save(optimizer)
    arrays: dict[str, Any] = {k: chainer.backend.CpuDevice().send(v) for k, v in s.target.items()}
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, mt_state, gauss = random.getstate()
    arrays.update(
        {
            _META + "format": np.array(FORMAT),
            _META + "progress": np.array(progress.to_json()),
            _META + "signature": np.array(json.dumps(signature.to_payload())),
            _META + "np_name": np.array(str(name)),
            _META + "np_keys": np.asarray(keys, dtype=np.int64),
            _META + "np_pos": np.array(int(pos)),
            _META + "np_has_gauss": np.array(int(has_gauss)),
            _META + "np_cached": np.array(float(cached)),
            _META + "py_random": np.array(json.dumps([version, list(mt_state), gauss])),
        }
    )
    return ckdir.save(progress.global_step, lambda f: np.savez(f, **arrays))


def load_checkpoint(path: Path) -> ChainerCheckpoint:
    """Read a checkpoint's progress and signature; CheckpointCorruptError if it does not read."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            if int(npz[_META + "format"]) != FORMAT:
                raise CheckpointCorruptError(f"{path}: checkpoint format is not {FORMAT}")
            progress = Progress.from_json(str(npz[_META + "progress"]))
            signature = json.loads(str(npz[_META + "signature"]))
            # Touch every array once: a truncated member fails here, not halfway into restore.
            for key in npz.files:
                npz[key]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise CheckpointCorruptError(f"{path}: cannot load: {e}") from e
    return ChainerCheckpoint(path=path, progress=progress, signature=signature)
