"""Data sets that ship inside installed packages, for runs with no network (`builtin:NAME`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kubetrain.data.prepare import RawDataset
from kubetrain.errors import DataError

__all__ = ["BUILTIN_PREFIX", "builtin_names", "load_builtin"]

BUILTIN_PREFIX = "builtin:"


def _digits() -> RawDataset:
    # scikit-learn's 1,797 real 8x8 handwritten digits, pixel values 0..16 (bundled, no download).
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return RawDataset(
        name="digits",
        x_train=np.asarray(bunch.data, dtype=np.float32).reshape(-1, 8, 8),
        y_train=np.asarray(bunch.target, dtype=np.int64),
        x_test=None,
        y_test=None,
        num_classes=10,
        scale=1 / 16,
    )


_BUILTINS: dict[str, Callable[[], RawDataset]] = {"digits": _digits}


def builtin_names() -> list[str]:
    """The names accepted after `builtin:`."""
    return sorted(_BUILTINS)


def load_builtin(source: str) -> RawDataset:
    """The raw arrays of `builtin:NAME`; DataError naming the known names otherwise."""
    name = source.removeprefix(BUILTIN_PREFIX)
    try:
        loader = _BUILTINS[name]
    except KeyError:
        raise DataError(
            f"{source}: unknown built-in data set {name!r}; expected one of "
            f"{[BUILTIN_PREFIX + n for n in builtin_names()]}"
        ) from None
    return loader()
