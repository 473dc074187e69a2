"""`download_dataset`: fetch a data set onto the workspace volume and describe it in a Dataset artifact."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from kubetrain.components._shared import LAUNCHER_IMAGE


# KFP's decorator is untyped; the component body runs from its source in the launcher image.
@dsl.component(base_image=LAUNCHER_IMAGE, install_kfp_package=False)  # type: ignore[untyped-decorator]
def download_dataset(
    dataset: Output[Dataset],
    source: str = "builtin:digits",
    sha256: str = "",
    shards: int = 1,
    workspace_pvc: str = "kubetrain-workspace",
    refresh: bool = False,
    cache_key: str = "",
) -> None:
    """Fetch a data set onto the workspace volume, in kubetrain's sharded dataset format.

    The data stays on the workspace claim, where every training pod mounts it. A second run with
    the same source reuses it. Mount the claim on this task at /workspace
    (kfp.kubernetes.mount_pvc); the kubetrain pipelines do, and cache this step: a later run with
    the same inputs skips it and its Dataset names the same directory on the claim. builtin: and a
    source pinned by sha256 (or #sha256= on every file) always mean the same bytes. A URL with no
    checksum is fetched once, then served from KFP's cache and the claim until a run passes
    refresh=True: it downloads again into the same directory, and every later cache hit resolves to
    the new copy. KFP's cache knows nothing of what refresh means, so a refresh must also change
    cache_key: the kubetrain pipelines pass the run's id there whenever refresh is set (a small
    uncached task computes it), so their refresh runs always download. In a pipeline of your own,
    do the same, or submit a refresh with enable_caching=False. The step warns when it downloads an
    unpinned source; to bound a copy's age, pin a checksum or schedule a recurring run with
    refresh=True.

    Args:
        source: builtin:digits (no network), an http(s)/s3/gs/file URL of an .npz or archive, a
            base URL ending in / holding the MNIST idx files, or comma-separated MNIST file URLs
            (each may end in #sha256=HEX). s3:// and gs:// need their drivers in the image: kubetrain's
            launcher image has them when built with LAUNCHER_EXTRAS=s3,gcs (images/build.sh).
        sha256: Expected sha256 of a single-file source; empty to skip the check.
        shards: Number of training shards to write (parameter-server tasks stay inside one shard).
        workspace_pvc: Name of the ReadWriteMany PersistentVolumeClaim shared with the training jobs.
        refresh: Download again even when the workspace already holds this source (in a run
            KFP's cache does not serve: give it a new cache_key).
        cache_key: Not read by the step: part of KFP's cache key, so a value KFP has not seen
            makes the step run instead of being served from the cache. Empty by default.

    Returns:
        dataset: `dataset.json`; its metadata gives the claim (workspace_pvc), the pod-side
            directory (path), record counts per split, feature shape and class count.
    """
    from kubetrain.kfp_runtime.download_step import download_dataset_step

    download_dataset_step(
        source=source,
        sha256=sha256,
        shards=shards,
        workspace_pvc=workspace_pvc,
        refresh=refresh,
        dataset=dataset,
        cache_key=cache_key,
    )
