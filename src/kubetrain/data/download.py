"""`download(source, out_dir)`: fetch a data set and write it in the dataset format."""

from __future__ import annotations

import os

from kubetrain.data.builtin import BUILTIN_PREFIX, load_builtin
from kubetrain.data.dataset_format import DatasetInfo
from kubetrain.data.prepare import write_raw_dataset
from kubetrain.errors import DataError

__all__ = ["download"]


def download(
    source: str,
    out_dir: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    shards: int = 1,
) -> DatasetInfo:
    """Fetch `source` and write it to `out_dir` as `dataset.json` plus `shards` training shards."""
    if source.startswith(BUILTIN_PREFIX):
        if sha256 is not None:
            raise DataError(f"{source}: --sha256 applies to downloaded files, not built-in data")
        return write_raw_dataset(load_builtin(source), out_dir, shards=shards, source=source)
    raise DataError(f"{source}: unsupported source; expected builtin:digits")
