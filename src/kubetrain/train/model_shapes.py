"""The architecture both frameworks share, shaped from a dataset (no framework imported here).

- `mlp`: flatten, two hidden layers of 128 ReLU units, a linear classifier.
- `cnn`: two 3x3 conv layers (16, 32 channels) with ReLU; a 2x2 max-pool after the first only
  when the image is at least 16 pixels on a side (28x28 MNIST), and after the second always, then
  a 64-unit hidden layer and the classifier. 8x8 digits: 32x4x4; 28x28 MNIST: 32x7x7.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubetrain.errors import InvalidInputError, SpecError

__all__ = [
    "CNN_CHANNELS",
    "CNN_HIDDEN",
    "HIDDEN",
    "MODEL_NAMES",
    "ModelShape",
    "cnn_flat_features",
    "cnn_geometry",
]

# The architectures kubetrain's DDP and ChainerMN trainers build; here, not in train.common, so the
# launcher validates a name without importing numpy.
MODEL_NAMES = ("mlp", "cnn")

HIDDEN = 128
CNN_CHANNELS = (16, 32)
CNN_HIDDEN = 64
POOL_FIRST_MIN_SIDE = 16


@dataclass(frozen=True)
class ModelShape:
    """What a model needs to know about its data: input feature shape and number of classes."""

    feature_shape: tuple[int, ...]
    num_classes: int

    def __post_init__(self) -> None:
        if not self.feature_shape or any(d < 1 for d in self.feature_shape):
            raise SpecError("feature_shape", self.feature_shape, "positive dimensions")
        if self.num_classes < 2:
            raise SpecError("num_classes", self.num_classes, ">= 2")

    @property
    def flat_features(self) -> int:
        """Number of input features after flattening."""
        n = 1
        for d in self.feature_shape:
            n *= d
        return n


def cnn_geometry(feature_shape: Sequence[int]) -> tuple[int, int, int, bool]:
    """(channels, height, width, pool after first conv) for the CNN; error if not an image."""
    if len(feature_shape) == 3:
        c, h, w = feature_shape
    elif len(feature_shape) == 2:
        c, (h, w) = 1, feature_shape
    else:
        raise InvalidInputError(
            f"--model cnn needs image features (C, H, W) or (H, W); the dataset has feature "
            f"shape {tuple(feature_shape)}: use --model mlp"
        )
    if min(h, w) < 2:
        raise InvalidInputError(f"--model cnn needs images of at least 2x2; got {h}x{w}")
    return c, h, w, min(h, w) >= POOL_FIRST_MIN_SIDE


def cnn_flat_features(feature_shape: Sequence[int]) -> int:
    """Features entering the CNN's hidden layer (after the convolutions and pools)."""
    _, h, w, pool_first = cnn_geometry(feature_shape)
    if pool_first:
        h, w = h // 2, w // 2
    return CNN_CHANNELS[1] * (h // 2) * (w // 2)
