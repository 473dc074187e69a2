"""The MLP and CNN in both frameworks: shaped from the dataset, same sizes, files round-trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kubetrain.errors import InvalidInputError
from kubetrain.train import chainer_models
from kubetrain.train.model_shapes import ModelShape, cnn_flat_features

torch = pytest.importorskip("torch")
from kubetrain.train import torch_models  # noqa: E402  (needs torch)

SHAPES = [((1, 8, 8), 10), ((1, 28, 28), 10), ((3, 32, 32), 5), ((28, 28), 10)]


# Any: torch and chainer are untyped for mypy (pyproject.toml skips them).
def _torch_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _chainer_params(model: Any) -> int:
    return sum(p.size for p in model.params())


@pytest.mark.parametrize("name", ["mlp", "cnn"])
@pytest.mark.parametrize(("feature_shape", "classes"), SHAPES)
def test_both_frameworks_build_the_same_model(name: str, feature_shape: tuple[int, ...], classes: int) -> None:
    shape = ModelShape(feature_shape, classes)
    tm = torch_models.build_model(name, shape)
    cm = chainer_models.build_model(name, shape)
    assert _torch_params(tm) == _chainer_params(cm)
    x = np.random.default_rng(0).standard_normal((5, *feature_shape)).astype(np.float32)
    assert tuple(tm(torch.from_numpy(x)).shape) == (5, classes)
    assert cm(x).shape == (5, classes)


def test_cnn_geometry_for_digits_and_mnist() -> None:
    assert cnn_flat_features((1, 8, 8)) == 32 * 4 * 4
    assert cnn_flat_features((1, 28, 28)) == 32 * 7 * 7


def test_cnn_needs_images() -> None:
    with pytest.raises(InvalidInputError, match="use --model mlp"):
        torch_models.build_model("cnn", ModelShape((64,), 10))
    with pytest.raises(InvalidInputError, match="use --model mlp"):
        chainer_models.build_model("cnn", ModelShape((64,), 10))


def test_mlp_takes_flat_vectors() -> None:
    shape = ModelShape((64,), 3)
    out = torch_models.build_model("mlp", shape)(torch.zeros(2, 64))
    assert tuple(out.shape) == (2, 3)


def test_torch_model_file_round_trips(tmp_path: Path) -> None:
    shape = ModelShape((1, 8, 8), 10)
    model = torch_models.build_model("cnn", shape)
    torch_models.save_model_file(tmp_path / "model.pt", name="cnn", shape=shape, model=model)
    loaded, payload = torch_models.load_model_file(tmp_path / "model.pt")
    assert payload["model"] == "cnn"
    x = torch.randn(3, 1, 8, 8)
    assert torch.equal(model(x), loaded(x))


def test_chainer_model_file_round_trips(tmp_path: Path) -> None:
    shape = ModelShape((1, 8, 8), 10)
    model = chainer_models.build_model("mlp", shape)
    chainer_models.save_model_file(tmp_path / "model.npz", name="mlp", shape=shape, model=model)
    loaded, meta = chainer_models.load_model_file(tmp_path / "model.npz")
    assert meta == {"model": "mlp", "feature_shape": (1, 8, 8), "num_classes": 10}
    x = np.random.default_rng(1).standard_normal((3, 1, 8, 8)).astype(np.float32)
    assert np.array_equal(model(x).array, loaded(x).array)
    # Plain Chainer reads the same file.
    plain = chainer_models.build_model("mlp", shape)
    chainer_models.chainer.serializers.load_npz(tmp_path / "model.npz", plain)
    assert np.array_equal(plain(x).array, model(x).array)
