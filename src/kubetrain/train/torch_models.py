"""The two PyTorch models, shaped from a dataset's feature shape and class count.

The architecture is described in `model_shapes.py`; the Chainer models in `chainer_models.py`
have exactly the same layers and parameter counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from kubetrain.errors import SpecError
from kubetrain.fileio import atomic_write
from kubetrain.train.model_shapes import (
    CNN_CHANNELS,
    CNN_HIDDEN,
    HIDDEN,
    ModelShape,
    cnn_flat_features,
    cnn_geometry,
)

__all__ = ["ModelShape", "build_model", "load_model_file", "save_model_file"]


class _CNN(nn.Module):  # type: ignore[misc]  # torch is untyped for mypy (follow_imports=skip)
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        c, h, w, pool_first = cnn_geometry(shape.feature_shape)
        self.image_shape = (c, h, w)
        c1, c2 = CNN_CHANNELS
        self.features = nn.Sequential(
            nn.Conv2d(c, c1, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2) if pool_first else nn.Identity(),
            nn.Conv2d(c1, c2, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(cnn_flat_features(shape.feature_shape), CNN_HIDDEN),
            nn.ReLU(),
            nn.Linear(CNN_HIDDEN, shape.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.reshape(x.shape[0], *self.image_shape)))


def build_model(name: str, shape: ModelShape) -> nn.Module:
    """A freshly initialised `mlp` or `cnn` for `shape` (seed torch first for identical ranks)."""
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(shape.flat_features, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, shape.num_classes),
        )
    if name == "cnn":
        return _CNN(shape)
    raise SpecError("--model", name, "'mlp' or 'cnn'")


def save_model_file(path: Path, *, name: str, shape: ModelShape, model: nn.Module) -> None:
    """Write `model.pt`: the state dict plus what :func:`load_model_file` needs to rebuild it."""
    payload = {
        "model": name,
        "feature_shape": list(shape.feature_shape),
        "num_classes": shape.num_classes,
        "state_dict": model.state_dict(),
    }
    atomic_write(path, lambda f: torch.save(payload, f))


def load_model_file(path: Path) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model saved by :func:`save_model_file`; returns (model, payload)."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    shape = ModelShape(tuple(payload["feature_shape"]), int(payload["num_classes"]))
    model = build_model(str(payload["model"]), shape)
    model.load_state_dict(payload["state_dict"])
    return model, payload
