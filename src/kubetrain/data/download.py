"""`download(source, out_dir)`: fetch a data set and write it in the dataset format.

A source is one of

- ``builtin:digits``: scikit-learn's 8x8 digits (a copy shipped in kubetrain), no network needed;
- one file (http(s) URL, object-store URL such as ``s3://``/``gs://``, ``file://`` URL or path):
  an ``.npz``, a tar/zip/gz archive, or a gzip'd npz;
- a base URL ending in ``/`` (or a local directory) holding the four MNIST files
  (``train-images-idx3-ubyte[.gz]`` ...; the ``t10k`` test files are optional);
- a list of URLs (a sequence, or one comma-separated string) naming the MNIST files, each
  optionally with a ``#sha256=HEX`` fragment.

Nothing is written to `out_dir` until the whole data set has been fetched, verified and
converted; then it appears at once (see :func:`kubetrain.data.dataset_format.write_dataset`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from kubetrain.data.archives import MAX_UNPACKED_BYTES
from kubetrain.data.builtin import BUILTIN_PREFIX, load_builtin
from kubetrain.data.dataset_format import DatasetInfo
from kubetrain.data.dataset_writer import check_output_dir
from kubetrain.data.errors import (
    CorruptFileError,
    DataError,
    DiskFullError,
    DownloadUnavailableError,
    HTTPStatusError,
)
from kubetrain.data.fetch import (
    Fetched,
    FetchOptions,
    default_cache_dir,
    fetch,
    is_local,
    normalize_sha256,
    split_checksum,
)
from kubetrain.data.formats import LocalFile, load_files
from kubetrain.data.http import RetryPolicy
from kubetrain.data.prepare import write_raw_dataset
from kubetrain.data.sources import Source, as_source, describe_source, parse_source
from kubetrain.data.stores import local_path, store_exists
from kubetrain.urls import redact_url

__all__ = ["MNIST_FILES", "describe_source", "download", "parse_source"]

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _with_source(error: DataError, label: str) -> DataError:
    """`error` prefixed with the source, keeping the class that sets the exit code (a full disk stays 4)."""
    message = f"{label}: {error}"
    for kind in (DiskFullError, DownloadUnavailableError, CorruptFileError):
        if isinstance(error, kind):
            return kind(message)
    return DataError(message)


def _refresh_hint(error: CorruptFileError, fetched: Sequence[Fetched]) -> str | None:
    """What to do when the damaged file is an unverified cached download: fetch it again."""
    for f in fetched:
        # A verified copy is byte for byte what the checksum pins: downloading it again cannot help.
        if not is_local(f.url) and f.sha256 is None and redact_url(f.url) in str(error):
            return (
                f"the cached download {f.path} may be damaged (a transfer cut short, or a file that "
                "changed at the source): download it again with --refresh (refresh=True)"
            )
    return None


def _is_base(url: str) -> bool:
    if is_local(url):
        return local_path(url).is_dir()
    return url.endswith("/")


def _exists(url: str) -> bool | None:
    """Whether `url` exists; None for http(s), where only the request itself can tell."""
    if is_local(url):
        return local_path(url).is_file()
    if url.startswith(("http://", "https://")):
        return None
    return store_exists(url)


def _fetch_base(base: str, options: FetchOptions) -> list[Fetched]:
    """The MNIST files under a base URL or directory, preferring the .gz names."""
    found: list[Fetched] = []
    for name in MNIST_FILES:
        if is_local(base):
            candidates = [os.fspath(local_path(base) / (name + ext)) for ext in (".gz", "")]
        else:
            candidates = [base + name + ext for ext in (".gz", "")]
        got = None
        for url in candidates:
            if _exists(url) is False:
                continue
            try:
                got = fetch(url, sha256=None, options=options)
            except HTTPStatusError as e:
                if e.status == 404:
                    continue
                raise
            break
        if got is not None:
            found.append(got)
        elif name.startswith("train"):
            raise DataError(
                f"{base}: has no {name}: tried {' and '.join(candidates)}; expected the MNIST "
                "files train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] there"
            )
    return found


def download(
    source: str | Sequence[str] | Source,
    out_dir: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    shards: int = 1,
    cache_dir: str | os.PathLike[str] | None = None,
    refresh: bool = False,
    retry: RetryPolicy | None = None,
    progress_stream: TextIO | None = None,
    quiet: bool = False,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
) -> DatasetInfo:
    """Fetch `source` and write it to `out_dir` as `dataset.json` plus `shards` training shards.

    `sha256` checks the one file of a single-file source (use ``URL#sha256=HEX`` per file in a
    list). Remote files are cached in `cache_dir` (default :func:`default_cache_dir`) and reused
    by later runs unless `refresh`. Progress goes to `progress_stream` (stderr) unless `quiet`. An
    archive, .gz or npz may unpack to `max_unpacked_bytes` (default 1 GiB) at most.
    Raises DataError (or a subclass) naming the source and the problem; `out_dir` is then left as
    it was.
    """
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise DataError(f"shards: got {shards!r}; expected an integer >= 1")
    if isinstance(max_unpacked_bytes, bool) or not isinstance(max_unpacked_bytes, int) or max_unpacked_bytes < 1:
        raise DataError(f"--max-unpacked-bytes: got {max_unpacked_bytes!r}; expected an integer >= 1")
    parsed = as_source(source)
    urls, label = list(parsed.urls), parsed.label
    expected = normalize_sha256(sha256, label) if sha256 is not None else None
    check_output_dir(out_dir)
    if urls[0].startswith(BUILTIN_PREFIX):
        if len(urls) > 1 or expected is not None:
            raise DataError(f"{label}: a built-in data set stands alone (no other sources, no --sha256)")
        return write_raw_dataset(load_builtin(urls[0]), out_dir, shards=shards, source=urls[0])
    options = FetchOptions(
        cache_dir=Path(cache_dir) if cache_dir is not None else default_cache_dir(),
        retry=retry or RetryPolicy(),
        refresh=refresh,
        progress_stream=progress_stream,
        quiet=quiet,
    )
    if expected is not None and (len(urls) > 1 or _is_base(urls[0])):
        raise DataError(
            f"{label}: --sha256 checks a single file, but this source has several; append "
            "#sha256=HEX to each URL instead"
        )
    fetched: list[Fetched] = []
    if len(urls) == 1 and _is_base(urls[0]):
        fetched = _fetch_base(urls[0], options)
    else:
        for item in urls:
            url, fragment_sha = split_checksum(item)
            fetched.append(fetch(url, sha256=fragment_sha or expected, options=options))
    files = [LocalFile(f.path, f.name, redact_url(f.url)) for f in fetched]
    try:
        with tempfile.TemporaryDirectory(prefix="kubetrain-download-") as work:
            raw = load_files(files, Path(work), max_bytes=max_unpacked_bytes)
            return write_raw_dataset(raw, out_dir, shards=shards, source=label)
    except DataError as e:
        error = e
        if isinstance(e, CorruptFileError) and (hint := _refresh_hint(e, fetched)) is not None:
            error = CorruptFileError(f"{e}; {hint}")
        # Problems found in the content (an empty set, bad labels) must still name the source.
        if not any(f.origin in str(error) for f in files):
            error = _with_source(error, label)
        if error is e:
            raise
        raise error from e
