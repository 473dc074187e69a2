"""The two Chainer models: the same layers and sizes as `torch_models.py`, written in Chainer.

Importing this module makes Chainer importable without `SETUPTOOLS_USE_DISTUTILS=stdlib` in the
environment: Chainer 7.8.1 imports `numpy.distutils`, which fails under setuptools' distutils.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _use_stdlib_distutils() -> None:
    """Make `import numpy.distutils` (inside `import chainer`) work in an already running process.

    Setting SETUPTOOLS_USE_DISTUTILS now is not enough: setuptools' `distutils-precedence.pth`
    read it at interpreter start and, unless it was `stdlib` then, put an import hook in place
    that serves setuptools' distutils (which lacks `distutils.msvccompiler`). So the variable is
    set for child processes and the hook is taken out for this one.
    """
    os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
    if os.environ["SETUPTOOLS_USE_DISTUTILS"] != "stdlib" or "distutils" in sys.modules:
        return
    try:
        import _distutils_hack  # type: ignore[import-untyped]
    except ImportError:  # setuptools without the hook: stdlib distutils is what we get anyway
        return
    remove = getattr(_distutils_hack, "remove_shim", None)  # absent on Python >= 3.12
    if remove is not None:
        remove()


_use_stdlib_distutils()
with warnings.catch_warnings():
    # Chainer's import warns (pkg_resources, stdlib distutils) on every rank at every start.
    warnings.simplefilter("ignore", UserWarning)
    warnings.simplefilter("ignore", DeprecationWarning)
    import chainer
    import chainer.functions as F  # noqa: N812
    import chainer.links as L  # noqa: N812

import numpy as np  # noqa: E402

from kubetrain.errors import SpecError  # noqa: E402
from kubetrain.fileio import atomic_write  # noqa: E402
from kubetrain.train.model_shapes import (  # noqa: E402
    CNN_CHANNELS,
    CNN_HIDDEN,
    HIDDEN,
    ModelShape,
    cnn_flat_features,
    cnn_geometry,
)

# `chainer` and `F` are re-exported: importing them from here guarantees the distutils fix-up.
__all__ = ["F", "build_model", "chainer", "load_model_file", "save_model_file"]

_META = "_kubetrain/"


class MLP(chainer.Chain):  # type: ignore[misc]  # chainer is untyped for mypy
    """Flatten, two hidden layers of 128 ReLU units, a linear classifier."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(shape.flat_features, HIDDEN)
            self.l2 = L.Linear(HIDDEN, HIDDEN)
            self.l3 = L.Linear(HIDDEN, shape.num_classes)

    def forward(self, x: Any) -> Any:
        h = F.relu(self.l1(x.reshape(x.shape[0], -1)))
        return self.l3(F.relu(self.l2(h)))


class CNN(chainer.Chain):  # type: ignore[misc]
    """Two 3x3 conv layers (16, 32), max-pools as in the PyTorch CNN, a 64-unit hidden layer."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        c, h, w, self.pool_first = cnn_geometry(shape.feature_shape)
        self.image_shape = (c, h, w)
        c1, c2 = CNN_CHANNELS
        with self.init_scope():
            self.conv1 = L.Convolution2D(c, c1, ksize=3, pad=1)
            self.conv2 = L.Convolution2D(c1, c2, ksize=3, pad=1)
            self.fc1 = L.Linear(cnn_flat_features(shape.feature_shape), CNN_HIDDEN)
            self.fc2 = L.Linear(CNN_HIDDEN, shape.num_classes)

    def forward(self, x: Any) -> Any:
        h = F.relu(self.conv1(x.reshape(x.shape[0], *self.image_shape)))
        if self.pool_first:
            # cover_all=False floors odd sizes, as torch's MaxPool2d does.
            h = F.max_pooling_2d(h, 2, cover_all=False)
        h = F.max_pooling_2d(F.relu(self.conv2(h)), 2, cover_all=False)
        return self.fc2(F.relu(self.fc1(h.reshape(h.shape[0], -1))))


def build_model(name: str, shape: ModelShape) -> chainer.Chain:
    """A freshly initialised `mlp` or `cnn` (seed numpy first for identical ranks)."""
    if name == "mlp":
        return MLP(shape)
    if name == "cnn":
        return CNN(shape)
    raise SpecError("--model", name, "'mlp' or 'cnn'")


def save_model_file(path: Path, *, name: str, shape: ModelShape, model: chainer.Chain) -> None:
    """Write `model.npz`: Chainer's npz layout (`load_npz` reads it) plus the architecture."""
    s = chainer.serializers.DictionarySerializer()
    s.save(model.copy(mode="copy").to_cpu())
    arrays: dict[str, Any] = dict(s.target)
    arrays[_META + "model"] = np.array(name)
    arrays[_META + "feature_shape"] = np.array(shape.feature_shape, dtype=np.int64)
    arrays[_META + "num_classes"] = np.array(shape.num_classes, dtype=np.int64)
    atomic_write(path, lambda f: np.savez(f, **arrays))


def load_model_file(path: Path) -> tuple[chainer.Chain, Mapping[str, Any]]:
    """Rebuild the model saved by :func:`save_model_file`; returns (model, metadata)."""
    with np.load(path, allow_pickle=False) as npz:
        name = str(npz[_META + "model"])
        feature_shape = tuple(int(d) for d in npz[_META + "feature_shape"])
        num_classes = int(npz[_META + "num_classes"])
        model = build_model(name, ModelShape(feature_shape, num_classes))
        chainer.serializers.NpzDeserializer(npz).load(model)
    meta = {"model": name, "feature_shape": feature_shape, "num_classes": num_classes}
    return model, meta
