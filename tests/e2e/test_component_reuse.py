"""Reuse: the compiled component YAMLs in a brand-new pipeline, run on this machine.

What someone who only has the YAML files does: load them with kfp's own loader, wire them into a
pipeline of their own (other parameter names, a master-only PyTorchJob, a command override) and
run it. The components must not depend on anything of kubetrain's pipelines.
"""

# No `from __future__ import annotations`: KFP reads pipeline signatures as real types.
import json
from pathlib import Path

import pytest
from kfp import components, dsl

from kubetrain.components import compiled_yaml
from kubetrain.kfp_runtime.reuse import load_component
from kubetrain.tooling.local_run import run_pipeline_locally

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = compiled_yaml()


@pytest.fixture(autouse=True)
def _single_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_loaded_components_train_in_a_new_pipeline(tmp_path: Path) -> None:
    download = components.load_component_from_file(str(COMPONENTS["download_dataset"]))
    train = components.load_component_from_file(str(COMPONENTS["pytorch_train"]))

    @dsl.pipeline(name="my-own-pipeline")
    def my_pipeline(data_source: str = "builtin:digits", claim: str = "my-claim") -> None:
        data = download(source=data_source, workspace_pvc=claim, shards=2)
        train(
            dataset=data.outputs["dataset"],
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
            task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
            workspace_pvc=claim,
            workers=0,
            epochs=5,
            delete_after="always",
        )

    outcome = run_pipeline_locally(my_pipeline, name="my-own-pipeline", arguments={}, runs_dir=tmp_path)
    assert outcome.state == "SUCCEEDED", outcome.to_json()
    trained = outcome.task("pytorch-train")
    assert trained.metrics["world_size"] == 1  # master only
    assert trained.metrics["test_accuracy"] >= 0.95
    assert trained.parameters["status"] == "Succeeded"
    model = Path(trained.artifacts["model"])
    assert (model / "model.pt").is_file()
    # The data went to the claim this pipeline named, under the local backend's directory for it.
    assert any((outcome.claims_dir / "my-claim" / "datasets").iterdir())


def test_a_failing_job_fails_its_step_and_stays_for_debugging(tmp_path: Path) -> None:
    download = load_component(str(COMPONENTS["download_dataset"]))
    train = load_component(str(COMPONENTS["pytorch_train"]))
    assert {p.field.name for p in train.component_spec.task_config_passthroughs} >= {"RESOURCES", "ENV"}

    @dsl.pipeline(name="failing")
    def failing() -> None:
        data = download()
        train(
            dataset=data.outputs["dataset"],
            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
            task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
            workers=0,
            backoff_limit=0,
            # The program exits 3 whatever flags it gets: a job that really fails.
            command=["python", "-c", "raise SystemExit(3)"],
        )

    outcome = run_pipeline_locally(failing, name="failing", arguments={}, runs_dir=tmp_path)
    assert outcome.state == "FAILED"
    assert outcome.task("download-dataset").state == "SUCCEEDED"
    assert outcome.task("pytorch-train").state == "FAILED"
    # delete_after=success keeps a failed job: its logs are on disk for `kubectl logs`-style reading.
    logs = list((outcome.run_dir / "local" / "jobs").rglob("*master-0*.log"))
    assert logs, "the failed job's pod logs are gone"
    assert json.dumps(outcome.to_json())  # the outcome stays JSON-serialisable on failure
