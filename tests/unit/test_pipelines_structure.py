"""The compiled pipelines' structure: parameters, caching, workspace mounts, run-time job names, fan-out."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kubetrain.tooling.catalog import PIPELINES, Entry

LAUNCHER_COMPONENTS = {"comp-download-dataset", "comp-pytorch-train", "comp-chainermn-train", "comp-ps-train"}
TRAINERS = {"pytorch-train", "chainermn-train", "ps-train"}


def _docs(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    spec, platform = yaml.safe_load_all(Entry("pipeline", name).yaml_path.read_text())
    return spec, platform


@pytest.mark.parametrize("name", PIPELINES)
def test_dataset_and_workspace_parameters(name: str) -> None:
    spec, _ = _docs(name)
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["dataset"]["defaultValue"] == "builtin:digits"
    assert params["workspace_pvc"]["defaultValue"] == "kubetrain-workspace"
    assert all(p.get("description") for p in params.values()), f"{name}: undocumented parameters"


@pytest.mark.parametrize("name", PIPELINES)
def test_launcher_tasks_mount_the_workspace_and_only_the_download_is_cached(name: str) -> None:
    spec, platform = _docs(name)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for task_name, task in spec["root"]["dag"]["tasks"].items():
        component = task["componentRef"]["name"]
        if component not in LAUNCHER_COMPONENTS:
            continue
        # The download's Dataset names a directory on the claim that a later run can use as it is; a
        # training task's output is a job and a model, which a cache hit would not make.
        cached = component.startswith("comp-download-dataset")
        assert task["cachingOptions"].get("enableCache", False) is cached, (
            f"{name}/{task_name}: {task['cachingOptions']}"
        )
        executor = spec["components"][component]["executorLabel"]
        (mount,) = executors[executor]["pvcMount"]
        assert mount["mountPath"] == "/workspace"
        assert mount["pvcNameParameter"] == {"componentInputParameter": "workspace_pvc"}


@pytest.mark.parametrize("legacy", [False, True], ids=["kfp", "kfp-pre-2.15"])
@pytest.mark.parametrize("name", PIPELINES)
def test_a_refresh_run_misses_the_download_cache_whatever_the_runs_caching(name: str, legacy: bool) -> None:
    """refresh_dataset=True alone must download again: KFP served a second identical refresh run from its cache.

    The download's cache key takes one more input, computed by an uncached task from the refresh
    flag and the run's id: empty without a refresh (later runs are cache hits), the run's id with
    one (never seen by KFP's cache, even in a run submitted with enable_caching=True).
    """
    from kubetrain.tooling.legacy import legacy_path

    path = Entry("pipeline", name).yaml_path
    spec = next(yaml.safe_load_all((legacy_path(path) if legacy else path).read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    key, download = tasks["download-cache-key"], tasks["download-dataset"]
    assert key["cachingOptions"].get("enableCache", False) is False
    assert key["inputs"]["parameters"] == {
        "refresh": {"componentInputParameter": "refresh_dataset"},
        "run_id": {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}},
    }
    assert download["cachingOptions"] == {"enableCache": True}
    params = download["inputs"]["parameters"]
    assert params["refresh"] == {"componentInputParameter": "refresh_dataset"}
    assert params["cache_key"] == {
        "taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "download-cache-key"}
    }
    # The key task's body, as the executor runs it: the run's id with a refresh, else nothing.
    namespace: dict[str, Any] = {}
    executor = spec["components"][key["componentRef"]["name"]]["executorLabel"]
    exec(spec["deploymentSpec"]["executors"][executor]["container"]["command"][-1], namespace)
    assert namespace["download_cache_key"](refresh=True, run_id="run-1") == "run-1"
    assert namespace["download_cache_key"](refresh=False, run_id="run-1") == ""


@pytest.mark.parametrize("name", PIPELINES)
def test_job_names_are_left_to_the_step_at_run_time(name: str) -> None:
    spec, _ = _docs(name)
    trainers = [t for n, t in spec["root"]["dag"]["tasks"].items() if n in TRAINERS]
    assert trainers
    for task in trainers:
        params = task["inputs"]["parameters"]
        # Nothing fixed at compile time: the step reads its run and task from its output URI.
        assert not {"run_id", "task_id", "task_name"} & set(params), params
        component = spec["components"][task["componentRef"]["name"]]["inputDefinitions"]["parameters"]
        for identity in ("run_id", "task_id", "task_name"):
            assert component[identity]["defaultValue"] == "" and component[identity]["isOptional"] is True
        assert task["inputs"]["artifacts"]["dataset"]["taskOutputArtifact"]["producerTask"] == "download-dataset"


def test_compare_frameworks_downloads_once_trains_in_parallel_then_summarizes() -> None:
    spec, _ = _docs("compare_frameworks")
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"download-cache-key", "download-dataset", *TRAINERS, "compare-summary"}
    for trainer in TRAINERS:
        # Each trainer waits only for the download, so the three run side by side on a cluster.
        assert tasks[trainer]["dependentTasks"] == ["download-dataset"]
    assert sorted(tasks["compare-summary"]["dependentTasks"]) == sorted(TRAINERS)
    summary_inputs = tasks["compare-summary"]["inputs"]["artifacts"]
    assert {v["taskOutputArtifact"]["producerTask"] for v in summary_inputs.values()} == TRAINERS


@pytest.mark.parametrize("name", PIPELINES)
def test_launcher_pods_get_a_small_request(name: str) -> None:
    """A launcher without a request is BestEffort, evicted first, and its SIGTERM deletes the job."""
    from kubetrain.tooling.legacy import legacy_path

    spec, _ = _docs(name)
    executors = spec["deploymentSpec"]["executors"]
    for executor_name, executor in executors.items():
        resources = executor["container"].get("resources")
        if any(executor_name == f"exec-{t}" for t in TRAINERS):
            # KFP ≥ 2.15: a training task's resources are passthroughs for the training pods.
            assert resources is None, executor_name
        else:
            assert resources["resourceCpuRequest"] == "100m", executor_name
            assert resources["resourceMemoryRequest"] == "256Mi", executor_name
    # Before 2.15 (no passthroughs) a task's resources are its launcher pod's: every step has one.
    legacy = yaml.safe_load_all(legacy_path(Entry("pipeline", name).yaml_path).read_text(encoding="utf-8"))
    for executor_name, executor in next(iter(legacy))["deploymentSpec"]["executors"].items():
        assert executor["container"]["resources"]["resourceCpuRequest"] == "100m", executor_name
