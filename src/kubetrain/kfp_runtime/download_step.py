"""The `download_dataset` step: fetch a data set onto the workspace volume, describe it in a Dataset artifact.

The data itself stays on the workspace claim, where every training pod mounts it; the Dataset
artifact carries `dataset.json` and metadata saying where the data lies (claim and pod-side
path), how many records each split has and the feature shape. The directory is named after the
source, so a second run with the same source reuses the data instead of fetching it again
(unless `refresh`), and two pipelines with different sources never overwrite each other's data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

from kubetrain.data.dataset_format import DATASET_JSON, DatasetInfo, read_dataset_info
from kubetrain.data.sources import check_source, describe_source, parse_source
from kubetrain.errors import DataError, InvalidInputError
from kubetrain.kfp_runtime.artifacts import ArtifactLike, write_text
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.workspace import backend_kind, open_workspace

log = logging.getLogger(__name__)

DATASETS_DIR = "datasets"


def dataset_dir_name(source: str, *, sha256: str, shards: int) -> str:
    """A directory name that is readable and unique per (source, checksum, shards)."""
    first = parse_source(source)[0].split("#", 1)[0]
    if "://" in first:
        first = first.split("?", 1)[0]  # a presigned URL's query holds its signature: never in a path
    stem = first.split(":", 1)[1] if first.startswith("builtin:") else first.rstrip("/").rsplit("/", 1)[-1]
    stem = re.sub(r"\.(gz|tgz|zip|tar|npz|bz2|xz)$", "", stem)
    stem = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:40] or "data"
    digest = hashlib.sha256(f"{source}\x00{sha256}\x00{shards}".encode()).hexdigest()[:8]
    return f"{stem}-{digest}"


def _reusable(directory: Path, source: str, shards: int) -> DatasetInfo | None:
    """The dataset already in `directory` when it came from the same source with the same shards."""
    if not (directory / DATASET_JSON).is_file():
        return None
    try:
        info = read_dataset_info(directory)
    except DataError as e:
        log.warning("%s: ignoring an unreadable earlier download (%s)", directory, e)
        return None
    if info.source != describe_source(parse_source(source)) or len(info.shards("train")) != shards:
        return None
    return info


UNPINNED_WARNING = (
    "WARNING: {source} has no checksum: this copy is what later runs get (KFP's cache and the claim) "
    "until one passes refresh=True (in a pipeline of your own, with a new cache_key); "
    "pin it with sha256 (or #sha256=HEX on each file) to be sure of the bytes"
)


def is_pinned(source: str, sha256: str) -> bool:
    """Whether `source` always means the same bytes: builtin data, or a checksum for every file."""
    urls = parse_source(source)
    return all(u.startswith("builtin:") for u in urls) or bool(sha256) or all("#sha256=" in u for u in urls)


def dataset_metadata(info: DatasetInfo, *, claim: str, pod_path: str, source: str, reused: bool) -> dict[str, Any]:
    """The Dataset artifact's metadata: where the data is and what it holds."""
    return {
        "workspace_pvc": claim,
        "path": pod_path,
        "name": info.name,
        "source": source,
        "feature_shape": list(info.feature_shape),
        "num_classes": info.num_classes,
        "records": {split: info.num_records(split) for split in info.splits},
        "shards": {split: len(info.shards(split)) for split in info.splits},
        "reused": reused,
    }


@step
def download_dataset_step(
    *,
    source: str,
    sha256: str,
    shards: int,
    workspace_pvc: str,
    refresh: bool,
    dataset: ArtifactLike,
    cache_key: str = "",
) -> dict[str, Any]:
    """Fetch `source` to the workspace (or reuse it) and fill the Dataset artifact; returns its metadata.

    `cache_key` is the component's input that only KFP's cache reads (a new value makes the step run
    instead of being served a cached copy); the step itself has no use for it.
    """
    del cache_key
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise InvalidInputError(f"shards: got {shards!r}; expected an integer >= 1")
    # The checks `kubetrain run` makes before any step starts: the same inputs fail the same way here.
    check_source(source, sha256=sha256, shards=shards)
    workspace = open_workspace(workspace_pvc, kind=backend_kind())
    name = dataset_dir_name(source, sha256=sha256, shards=shards)
    pod_path = workspace.pod(DATASETS_DIR, name)
    local_dir = workspace.local(pod_path)
    local_dir.parent.mkdir(parents=True, exist_ok=True)
    info = None if refresh else _reusable(local_dir, source, shards)
    reused = info is not None
    if info is None:
        # Only a download needs the fetchers and numpy: a reused data set starts the step without them.
        from kubetrain.data.download import download

        info = download(source, local_dir, sha256=sha256 or None, shards=shards)
        if not is_pinned(source, sha256):
            print(UNPINNED_WARNING.format(source=describe_source(parse_source(source))), file=sys.stderr, flush=True)
    print(
        f"dataset {info.name}: {'reused' if reused else 'downloaded'} at {pod_path} on claim {workspace_pvc}; "
        + ", ".join(f"{split} {info.num_records(split)} records" for split in info.splits),
        flush=True,
    )
    shown = describe_source(parse_source(source))  # the metadata is readable in the KFP UI: no secrets
    metadata = dataset_metadata(info, claim=workspace_pvc, pod_path=pod_path, source=shown, reused=reused)
    write_text(dataset, json.dumps(info.to_json(), indent=2) + "\n")
    dataset.metadata.update(metadata)
    return metadata
