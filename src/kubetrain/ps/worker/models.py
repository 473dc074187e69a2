"""Models trained through the parameter servers: dense parameters plus embedding tables.

A PS model keeps its embedding tables *outside* the torch module: the tables live on the PS
shards, and the worker pulls just the rows a batch needs. `ids(x)` names those rows per table;
`forward(x, rows)` takes them gathered per record as `(batch, fields, dim)` tensors. The
gradients of the pulled rows are the sparse gradients pushed back.

- `mlp`: the dense digits/MNIST classifier (no tables); by default the same layers as the
  `mlp` of `kubetrain.train.torch_ddp`, so PS and DDP runs compare like for like.
- `cnn`: the image classifier of `kubetrain.train.torch_ddp --model cnn` (same layers), so
  every training component takes the same `mlp`/`cnn`.
- `wide_deep`: wide-and-deep for click prediction: a `wide` table of per-id weights (dim 1)
  summed into the logit, plus a `deep` table of embeddings fed through an MLP.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from kubetrain.errors import SpecError
from kubetrain.ps.common.embedding import TableConfig
from kubetrain.ps.common.model_names import MODEL_NAMES
from kubetrain.train.model_shapes import HIDDEN, ModelShape
from kubetrain.train.torch_models import build_model as build_ddp_model

__all__ = ["CNN", "MLP", "MODEL_NAMES", "PSModel", "WideDeep", "build_model"]


class PSModel(nn.Module):  # type: ignore[misc]
    """Base class: `tables` on the PS, dense parameters in the module."""

    tables: tuple[TableConfig, ...] = ()
    binary: bool = False

    def feed(self, x: npt.NDArray[np.float32], y: npt.NDArray[np.int64]) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of data set records as the model's input and labels (a user's model brings its own)."""
        return torch.from_numpy(x), torch.from_numpy(y)

    def ids(self, x: torch.Tensor) -> dict[str, npt.NDArray[np.int64]]:
        """The embedding ids each record needs, per table, shaped (batch, fields)."""
        del x
        return {}

    def forward(self, x: torch.Tensor, rows: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits: (batch, classes), or (batch,) for a binary model."""
        raise NotImplementedError

    def loss(self, logits: torch.Tensor, y: torch.Tensor, *, reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy (binary: with logits)."""
        if self.binary:
            return nn.functional.binary_cross_entropy_with_logits(logits, y.to(logits.dtype), reduction=reduction)
        return nn.functional.cross_entropy(logits, y, reduction=reduction)

    def predictions(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(predicted class, positive-class score) per record."""
        if self.binary:
            score = torch.sigmoid(logits)
            return (score >= 0.5).long(), score
        probs = torch.softmax(logits, dim=1)
        return probs.argmax(dim=1), probs[:, -1]


class MLP(PSModel):
    """Flatten, then fully connected layers with ReLU."""

    def __init__(
        self, *, feature_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (HIDDEN, HIDDEN)
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(feature_shape)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, rows: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Class logits."""
        del rows
        out: torch.Tensor = self.net(x)
        return out


class CNN(PSModel):
    """The DDP `cnn`'s layers (no tables): every framework trains the same architecture."""

    def __init__(self, *, feature_shape: Sequence[int], num_classes: int) -> None:
        super().__init__()
        self.net = build_ddp_model("cnn", ModelShape(tuple(int(d) for d in feature_shape), int(num_classes)))

    def forward(self, x: torch.Tensor, rows: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Class logits."""
        del rows
        out: torch.Tensor = self.net(x)
        return out


class WideDeep(PSModel):
    """Wide (per-id weights) + deep (embeddings through an MLP) over categorical fields.

    x holds one global feature id per field (ids of different fields never collide), stored as
    float32 in the dataset format, so ids must stay below 2**24.
    """

    binary = True

    def __init__(
        self,
        *,
        feature_shape: Sequence[int],
        num_classes: int,
        dim: int = 8,
        hidden: Sequence[int] = (32, 16),
        init_scale: float = 0.05,
    ) -> None:
        super().__init__()
        if len(feature_shape) != 1 or num_classes != 2:
            raise SpecError(
                "wide_deep data",
                (tuple(feature_shape), num_classes),
                "feature_shape (fields,) of integer ids and num_classes 2",
            )
        self.fields = int(feature_shape[0])
        self.dim = dim
        self.tables = (
            TableConfig("wide", 1, init_scale / 10),
            TableConfig("deep", dim, init_scale),
        )
        layers: list[nn.Module] = []
        width = self.fields * dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.deep = nn.Sequential(*layers)

    def ids(self, x: torch.Tensor) -> dict[str, npt.NDArray[np.int64]]:
        """Both tables use the record's field ids."""
        ids = x.detach().cpu().numpy().astype(np.int64)
        return {"wide": ids, "deep": ids}

    def forward(self, x: torch.Tensor, rows: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The click logit of each record."""
        batch = x.shape[0]
        wide = rows["wide"].reshape(batch, -1).sum(dim=1)
        deep = self.deep(rows["deep"].reshape(batch, self.fields * self.dim)).squeeze(1)
        out: torch.Tensor = wide + deep
        return out


def build_model(
    name: str,
    *,
    feature_shape: Sequence[int],
    num_classes: int,
    seed: int,
    model_args: Mapping[str, Any] | None = None,
) -> PSModel:
    """A model with seeded initial weights (every worker builds the same one)."""
    kwargs = dict(model_args or {})
    for key in ("hidden",):
        if key in kwargs:
            kwargs[key] = tuple(int(h) for h in kwargs[key])
    torch.manual_seed(seed)
    try:
        if name == "mlp":
            return MLP(feature_shape=feature_shape, num_classes=num_classes, **kwargs)
        if name == "cnn":
            return CNN(feature_shape=feature_shape, num_classes=num_classes, **kwargs)
        if name == "wide_deep":
            return WideDeep(feature_shape=feature_shape, num_classes=num_classes, **kwargs)
    except TypeError as e:
        raise SpecError("model_args", dict(model_args or {}), f"keyword arguments of {name}: {e}") from e
    raise SpecError("model", name, f"one of {list(MODEL_NAMES)}")
