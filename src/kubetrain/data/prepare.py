"""Turn raw arrays into a normalised, split dataset: the last step of every download.

Raw features are scaled to [0, 1] (by the dtype's maximum for integer pixels, or by a scale the
source states), shaped channel-first, then standardised with the mean and std of the training
split. Both numbers go into `dataset.json` so a model can undo or repeat the transform.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kubetrain.data.dataset_format import MAX_CLASSES, DatasetInfo
from kubetrain.data.dataset_writer import write_dataset
from kubetrain.errors import DataError

__all__ = ["SPLIT_SEED", "TEST_FRACTION", "RawDataset", "seeded_split", "write_raw_dataset"]

SPLIT_SEED = 20240611
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class RawDataset:
    """Arrays as a source provides them; `x_test`/`y_test` are None when it has no test split."""

    name: str
    x_train: npt.NDArray[np.generic]
    y_train: npt.NDArray[np.generic]
    x_test: npt.NDArray[np.generic] | None
    y_test: npt.NDArray[np.generic] | None
    num_classes: int | None = None  # None: 1 + the largest label
    scale: float | None = None  # None: 1/255 for uint8 pixels, 1 for anything else

    def __post_init__(self) -> None:
        if (self.x_test is None) != (self.y_test is None):
            raise DataError(f"{self.name}: a test split needs both x and y")
        if len(self.x_train) == 0:
            raise DataError(f"{self.name}: the training split is empty (0 records)")
        if self.x_test is not None and len(self.x_test) == 0:
            raise DataError(f"{self.name}: the test split is empty (0 records)")
        for split, x in (("train", self.x_train), ("test", self.x_test)):
            # Strings (or anything else numpy cannot scale) would fail the conversion to float32.
            if x is not None and not any(np.issubdtype(x.dtype, kind) for kind in (np.integer, np.floating, np.bool_)):
                raise DataError(
                    f"{self.name}: {split} inputs have dtype {x.dtype}; expected numbers (integers, floats or booleans)"
                )


def seeded_split(
    n: int, *, seed: int = SPLIT_SEED, test_fraction: float = TEST_FRACTION
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Deterministic train/test index arrays (each sorted) for a source with no test split."""
    if n < 2:
        raise DataError(f"cannot split {n} record(s) into train and test; expected at least 2")
    order = np.random.default_rng(seed).permutation(n)
    n_test = min(n - 1, max(1, round(n * test_fraction)))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def _channel_first(x: npt.NDArray[np.float32], name: str) -> npt.NDArray[np.float32]:
    # (n, h, w) images get one channel; (n, d) vectors and (n, c, h, w) stay as they are.
    if x.ndim == 3:
        return x[:, None, :, :]
    if x.ndim in (2, 4):
        return x
    raise DataError(f"{name}: x has shape {x.shape}; expected (n, d), (n, h, w) or (n, c, h, w)")


def write_raw_dataset(
    raw: RawDataset,
    out_dir: str | os.PathLike[str],
    *,
    shards: int,
    source: str,
    feature_shape: tuple[int, ...] | None = None,
) -> DatasetInfo:
    """Scale, shape, split (if needed), standardise and write `raw` as a dataset at `out_dir`."""
    x_train, y_train, x_test, y_test = raw.x_train, raw.y_train, raw.x_test, raw.y_test
    if x_test is None or y_test is None:
        train_idx, test_idx = seeded_split(len(x_train))
        x_train, x_test = x_train[train_idx], x_train[test_idx]
        y_train, y_test = y_train[train_idx], y_train[test_idx]
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(
            f"{raw.name}: train images are {x_train.shape[1:]} but test images are "
            f"{x_test.shape[1:]}; expected the same shape"
        )
    for split, y in (("train", y_train), ("test", y_test)):
        if not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"{raw.name}: {split} labels have dtype {y.dtype}; expected integers")
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= MAX_CLASSES:
            # num_classes is 1 + the largest label: a stray huge label would make a model that big.
            raise DataError(
                f"{raw.name}: {split} labels span [{low}, {high}]; expected class indices from 0 to "
                f"{MAX_CLASSES - 1} (at most {MAX_CLASSES} classes)"
            )
    num_classes = raw.num_classes or int(max(y_train.max(), y_test.max())) + 1
    scale = raw.scale if raw.scale is not None else (1 / 255 if x_train.dtype == np.uint8 else 1.0)
    xs = []
    for x in (x_train, x_test):
        xf = np.asarray(x, dtype=np.float32) * np.float32(scale)
        if feature_shape is not None:
            xf = xf.reshape(len(xf), *feature_shape)
        xs.append(_channel_first(xf, raw.name))
    mean = float(xs[0].mean(dtype=np.float64))
    # A constant feature set has std 0; dividing by 1 keeps x finite and is recorded as such.
    std = float(xs[0].std(dtype=np.float64)) or 1.0
    xs = [(x - np.float32(mean)) / np.float32(std) for x in xs]
    return write_dataset(
        out_dir,
        name=raw.name,
        x_train=xs[0],
        y_train=y_train,
        x_test=xs[1],
        y_test=y_test,
        num_classes=num_classes,
        shards=shards,
        normalization={"scale": float(scale), "mean": mean, "std": std},
        source=source,
    )
