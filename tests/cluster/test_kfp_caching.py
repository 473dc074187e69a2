"""KFP's cache on the real backend: the download step is reused, training never is (tier 3).

The shipped pipelines cache download_dataset (pipelines/_workspace.py): its Dataset names a
directory on the workspace claim, which a later run uses as it is. A cache hit runs no executor
pod, so "was it a hit" is read as "did the step's pod run". Training tasks are not cached, and
could not be hit anyway: their run_id input is the run's own id. Each scenario starts from
whatever earlier tests left in KFP's cache, so none depends on being the first run of its inputs,
and they run side by side.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterator

import pytest

from tests.cluster import kfp_runs
from tests.cluster.concurrent import Scenarios, scenarios
from tests.cluster.kfp_runs import KfpBackend
from tools.cluster.controlplane import Cluster

PACKAGE = kfp_runs.REPO_ROOT / "pipelines" / "mnist_pytorch.yaml"
JOB_LINE = re.compile(r"pytorch: job (\S+) on the kubernetes backend")
pytestmark = pytest.mark.timeout(2400)


@pytest.fixture(scope="module")
def kfp_backend(cluster: Cluster) -> KfpBackend:
    """The backend, with the images mnist_pytorch runs."""
    return kfp_runs.prepare(cluster, ["launcher", "pytorch"])


@pytest.fixture(scope="module")
def started(kfp_backend: KfpBackend) -> Iterator[Scenarios]:
    """The scenarios side by side (tests/cluster/concurrent.py); each one's runs follow one another.

    The refresh comes last, alone: it rewrites the dataset's directory on the claim, which the
    others' trainings read and their downloads find (dataset_writer swaps it in with two renames).
    """
    with scenarios() as running:
        for name, scenario in SCENARIOS.items():
            running.start(name, functools.partial(scenario, kfp_backend))

        def refresh_after_the_others() -> None:
            running.wait_ended(list(SCENARIOS))
            _refresh_dataset_downloads_again_past_the_cache(kfp_backend)

        running.start("refresh", refresh_after_the_others)
        yield running


def _run(kfp_backend: KfpBackend, name: str, *, enable_caching: bool | None = None) -> str:
    run = kfp_backend.client.create_run_from_pipeline_package(
        str(PACKAGE), arguments={"epochs": 1}, run_name=f"{name}-{uuid.uuid4().hex[:6]}",
        experiment_name=kfp_runs.EXPERIMENT, enable_caching=enable_caching,
    )  # fmt: skip
    finished = kfp_backend.wait(str(run.run_id))
    assert finished.state == "SUCCEEDED", f"{finished.state} {finished.error}\n{kfp_backend.workflow_tail(run.run_id)}"
    return str(run.run_id)


def _job_of(kfp_backend: KfpBackend, run_id: str) -> str:
    (log,) = kfp_backend.step_logs(run_id, "pytorch_train")
    found = JOB_LINE.search(log)
    assert found, log[-3000:]
    return found.group(1)


def _dataset_path(kfp_backend: KfpBackend, run_id: str) -> str:
    (dataset,) = [a for a in kfp_backend.artifacts(run_id) if a.type == "system.Dataset"]
    return str(dataset.properties["path"])


def _a_second_run_reuses_the_cached_download_and_trains_again(kfp_backend: KfpBackend) -> None:
    first = _run(kfp_backend, "cache-first")
    second = _run(kfp_backend, "cache-second")
    # The download was a cache hit: no pod of it ran in the second run...
    assert kfp_backend.step_logs(second, "download_dataset") == []
    # ...and its cached Dataset resolved for training: the same directory on the claim.
    assert _dataset_path(kfp_backend, second) == _dataset_path(kfp_backend, first)
    (log,) = kfp_backend.step_logs(second, "pytorch_train")
    assert _dataset_path(kfp_backend, first) in log, log[-3000:]
    # Training is never a hit (its run_id input differs): a new job, a new model from it.
    assert _job_of(kfp_backend, second) != _job_of(kfp_backend, first)
    models = [a for a in kfp_backend.artifacts(second) if a.type == "system.Model"]
    assert [m.properties["job_name"] for m in models] == [_job_of(kfp_backend, second)]


def _caching_forced_on_serves_the_first_runs_model_metrics_and_report(kfp_backend: KfpBackend) -> None:
    # kfp.Client's enable_caching=True turns the cache on for every task, training included. A
    # training task no longer takes run or task ids as inputs (it reads them from KFP), so with the
    # same inputs it is a cache hit, with KFP's semantics: no step runs (but the download's cache key,
    # which takes the run's id), no job is created, and the
    # Model, Metrics and HTML kfp.Client and the UI show are the first run's.
    first = _run(kfp_backend, "forced-first", enable_caching=True)
    second = _run(kfp_backend, "forced-second", enable_caching=True)
    assert kfp_backend.step_logs(second, "download_dataset") == []
    assert kfp_backend.step_logs(second, "pytorch_train") == []
    before, after = kfp_backend.artifacts(first), kfp_backend.artifacts(second)
    for kind in ("system.Model", "system.Metrics", "system.HTML"):
        uris_before = {a.uri for a in before if a.type == kind}
        uris_after = {a.uri for a in after if a.type == kind}
        assert uris_after and uris_after == uris_before, (kind, uris_before, uris_after)
    # The metrics shown are the first run's numbers (one epoch here: what they are matters less).
    (shown,) = [a for a in after if a.type == "system.Metrics"]
    (trained,) = [a for a in before if a.type == "system.Metrics"]
    assert shown.properties["test_accuracy"] == trained.properties["test_accuracy"] > 0


def _enable_caching_false_runs_the_download_and_trains_again(kfp_backend: KfpBackend) -> None:
    cached = _run(kfp_backend, "nocache-before")
    uncached = _run(kfp_backend, "nocache", enable_caching=False)
    (download,) = kfp_backend.step_logs(uncached, "download_dataset")
    # The step ran; the data on the claim is the same source's, so it is reused there, not fetched.
    assert "reused at" in download and "launcher: cpu" in download, download[-3000:]
    assert _job_of(kfp_backend, uncached) != _job_of(kfp_backend, cached)


def _refresh_dataset_downloads_again_past_the_cache(kfp_backend: KfpBackend) -> None:
    # What a URL with no checksum relies on to be fetched again (download_dataset's docstring): a
    # run with refresh_dataset=True, submitted as any other (the cache on). Twice, as a recurring
    # run would: the download's cache key is the run's id when refresh is set (pipelines/_download.py),
    # so the second is not served the first's copy, as it was while refresh was an input like any other.
    for attempt in ("refresh-1", "refresh-2"):
        run = kfp_backend.client.create_run_from_pipeline_package(
            str(PACKAGE), arguments={"epochs": 1, "refresh_dataset": True},
            run_name=f"{attempt}-{uuid.uuid4().hex[:6]}", experiment_name=kfp_runs.EXPERIMENT,
        )  # fmt: skip
        finished = kfp_backend.wait(str(run.run_id))
        assert finished.state == "SUCCEEDED", f"{attempt}: {finished.state} {finished.error}"
        (download,) = kfp_backend.step_logs(str(run.run_id), "download_dataset")
        assert "downloaded at" in download, download[-3000:]


SCENARIOS = {
    "second-run": _a_second_run_reuses_the_cached_download_and_trains_again,
    "forced": _caching_forced_on_serves_the_first_runs_model_metrics_and_report,
    "no-cache": _enable_caching_false_runs_the_download_and_trains_again,
}


def test_a_second_run_reuses_the_cached_download_and_trains_again(started: Scenarios) -> None:
    started.result("second-run")


def test_caching_forced_on_serves_the_first_runs_model_metrics_and_report(started: Scenarios) -> None:
    started.result("forced")


def test_enable_caching_false_runs_the_download_and_trains_again(started: Scenarios) -> None:
    started.result("no-cache")


def test_refresh_dataset_downloads_again_past_the_cache(started: Scenarios) -> None:
    started.result("refresh")
