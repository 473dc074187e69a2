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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.data.dataset_format import DATASET_JSON, DatasetInfo, read_dataset_info
from kubetrain.data.errors import write_error
from kubetrain.data.locks import directory_turn
from kubetrain.data.sources import Source, check_source
from kubetrain.errors import DataError, InvalidInputError
from kubetrain.kfp_runtime.artifacts import ArtifactLike, write_text
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.workspace import backend_kind, open_workspace

log = logging.getLogger(__name__)

DATASETS_DIR = "datasets"


@dataclass(frozen=True, kw_only=True)
class DownloadRequest:
    """The download step's inputs, by the component's names, checked once on construction.

    `source` is parsed once (`parsed`), after `shards` is checked and before anything else: the
    order `kubetrain run` checks them in (check_source), so the same inputs fail the same way there
    and here, before the workspace is opened.
    """

    source: str
    sha256: str
    shards: int
    workspace_pvc: str
    refresh: bool
    parsed: Source = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.shards, bool) or not isinstance(self.shards, int) or self.shards < 1:
            raise InvalidInputError(f"shards: got {self.shards!r}; expected an integer >= 1")
        object.__setattr__(self, "parsed", Source(self.source))
        check_source(self.parsed, sha256=self.sha256, shards=self.shards)

    @property
    def directory_name(self) -> str:
        """The data set's directory on the claim: readable, and unique per (source, checksum, shards)."""
        first = self.parsed.urls[0].split("#", 1)[0]
        if "://" in first:
            first = first.split("?", 1)[0]  # a presigned URL's query holds its signature: never in a path
        stem = first.split(":", 1)[1] if first.startswith("builtin:") else first.rstrip("/").rsplit("/", 1)[-1]
        stem = re.sub(r"\.(gz|tgz|zip|tar|npz|bz2|xz)$", "", stem)
        stem = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:40] or "data"
        # The source as given, not as parsed: the names earlier runs left on the claim stay the same.
        digest = hashlib.sha256(f"{self.source}\x00{self.sha256}\x00{self.shards}".encode()).hexdigest()[:8]
        return f"{stem}-{digest}"

    @property
    def pinned(self) -> bool:
        """Whether the source always means the same bytes: builtin data, or a checksum for every file."""
        urls = self.parsed.urls
        return all(u.startswith("builtin:") for u in urls) or bool(self.sha256) or all("#sha256=" in u for u in urls)

    def reusable(self, directory: Path) -> DatasetInfo | None:
        """The data set already in `directory` when it came from this source with these shards."""
        if not (directory / DATASET_JSON).is_file():
            return None
        try:
            info = read_dataset_info(directory)
        except DataError as e:
            log.warning("%s: ignoring an unreadable earlier download (%s)", directory, e)
            return None
        if info.source != self.parsed.label or len(info.shards("train")) != self.shards:
            return None
        return info


UNPINNED_WARNING = (
    "WARNING: {source} has no checksum: this copy is what later runs get (KFP's cache and the claim) "
    "until one passes refresh=True (in a pipeline of your own, with a new cache_key); "
    "pin it with sha256 (or #sha256=HEX on each file) to be sure of the bytes"
)


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


def _fetch_or_reuse(request: DownloadRequest, local_dir: Path) -> tuple[DatasetInfo, bool]:
    """The data set at `local_dir`, downloaded unless an earlier one from this source is there; and whether reused.

    Steps of runs started together on one claim take turns here (locks.py), so the first
    downloads and the others reuse its copy instead of each writing the same directory at once.
    """
    try:
        with directory_turn(local_dir):
            info = None if request.refresh else request.reusable(local_dir)
            if info is not None:
                return info, True
            # Only a download needs the fetchers and numpy: a reused data set starts the step without them.
            from kubetrain.data.download import download

            info = download(request.parsed, local_dir, sha256=request.sha256 or None, shards=request.shards)
    except OSError as e:  # the claim itself (the lock beside the data set): download() names its own
        raise write_error(local_dir, e, fix="check that the workspace claim is mounted and writable") from e
    if not request.pinned:
        print(UNPINNED_WARNING.format(source=request.parsed.label), file=sys.stderr, flush=True)
    return info, False


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
    request = DownloadRequest(source=source, sha256=sha256, shards=shards, workspace_pvc=workspace_pvc, refresh=refresh)
    workspace = open_workspace(request.workspace_pvc, kind=backend_kind())
    pod_path = workspace.pod(DATASETS_DIR, request.directory_name)
    local_dir = workspace.local(pod_path)
    info, reused = _fetch_or_reuse(request, local_dir)
    print(
        f"dataset {info.name}: {'reused' if reused else 'downloaded'} at {pod_path} on claim {request.workspace_pvc}; "
        + ", ".join(f"{split} {info.num_records(split)} records" for split in info.splits),
        flush=True,
    )
    # The metadata is readable in the KFP UI: the label, with no secrets.
    metadata = dataset_metadata(
        info, claim=request.workspace_pvc, pod_path=pod_path, source=request.parsed.label, reused=reused
    )
    write_text(dataset, json.dumps(info.to_json(), indent=2) + "\n")
    dataset.metadata.update(metadata)
    return metadata
