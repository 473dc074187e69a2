"""The shipped pipelines' download: cached by KFP, except in a run that asks for a refresh.

KFP's cache serves a task whose inputs it has seen before, so `refresh=True` alone only missed the
cache the first time: a second refresh run with the same inputs was served the first one's copy.
The download task therefore takes one more input, `cache_key`, from a small uncached task: empty
without a refresh (the same key every run, so a later run is a cache hit and no download pod
runs), the run's id with one (a key KFP has never seen, so the download runs and fetches again).

The key task takes the run's id as an input, so even a run submitted with enable_caching=True
(which caches every task) computes a fresh key. A `dsl.If` with two download tasks and
`dsl.OneOf` would save the key task's pod, but kfp.local (so `kubetrain run`) cannot run a
`dsl.OneOf` of artifacts ("Expected 1 artifact in ArtifactSelectorSpec. Got: 2").
"""

from typing import Any

from kfp import dsl

from kubetrain.components import download_dataset
from kubetrain.images import LAUNCHER_IMAGE
from kubetrain.pipelines._workspace import launcher_request, launcher_task


# KFP's decorator is untyped; the body runs from its source, so it imports nothing.
@dsl.component(base_image=LAUNCHER_IMAGE, install_kfp_package=False)  # type: ignore[untyped-decorator]
def download_cache_key(refresh: bool, run_id: str) -> str:
    """The download's cache key: empty without a refresh, else the run's id (new to KFP's cache)."""
    return run_id if refresh else ""


def download_task(*, source: Any, workspace_pvc: Any, refresh: Any) -> Any:
    """The download_dataset task of a shipped pipeline, cached unless `refresh` is set; returns it."""
    key = download_cache_key(refresh=refresh, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    key.set_caching_options(False)
    launcher_request(key)
    download = download_dataset(source=source, workspace_pvc=workspace_pvc, refresh=refresh, cache_key=key.output)
    return launcher_task(download, workspace_pvc=workspace_pvc, cache=True)
