"""Data sets that ship inside kubetrain, for runs with no network (`builtin:NAME`).

`digits.csv.gz` is a byte-for-byte copy of scikit-learn's `sklearn/datasets/data/digits.csv.gz`
(BSD-3-Clause), the UCI "Optical Recognition of Handwritten Digits" data (CC BY 4.0): 1,797 rows
of 64 pixel values 0..16 and the label. Shipping the 57 kB file here spares the launcher image
scikit-learn and SciPy (about 190 MB) that it needed for nothing else.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kubetrain.data.prepare import RawDataset
from kubetrain.data.sources import BUILTIN_NAMES, BUILTIN_PREFIX
from kubetrain.errors import DataError

__all__ = ["BUILTIN_PREFIX", "builtin_names", "load_builtin"]

DIGITS_FILE = "digits.csv.gz"


def _digits() -> RawDataset:
    # The 1,797 real 8x8 handwritten digits, pixel values 0..16, read as sklearn's load_digits reads them.
    with gzip.open(Path(__file__).with_name(DIGITS_FILE), "rt") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float64)
    return RawDataset(
        name="digits",
        x_train=table[:, :-1].astype(np.float32).reshape(-1, 8, 8),
        y_train=table[:, -1].astype(np.int64),
        x_test=None,
        y_test=None,
        num_classes=10,
        scale=1 / 16,
    )


_BUILTINS: dict[str, Callable[[], RawDataset]] = {"digits": _digits}
if sorted(_BUILTINS) != sorted(BUILTIN_NAMES):  # a name checked there must load here, and no other
    raise ImportError(f"kubetrain.data.builtin loads {sorted(_BUILTINS)}, sources accepts {sorted(BUILTIN_NAMES)}")


def builtin_names() -> list[str]:
    """The names accepted after `builtin:`."""
    return sorted(BUILTIN_NAMES)


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
