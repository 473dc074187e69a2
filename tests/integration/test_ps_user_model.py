"""A user's model module trained by kubetrain's parameter servers, end to end on this machine.

The `ps_train` step's own function with a model module (logistic regression with its own feed) in
a directory on PYTHONPATH, as it would be in the user's image: the request puts it on the master,
the master names it to the workers, the workers import and check it, the servers apply the
optimizer it names, and the master writes the model and metrics.json, all through the local
backend's JobSet.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kubetrain.kfp_runtime.download_step import download_dataset_step
from kubetrain.kfp_runtime.frameworks import train_ps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODULE = "team_models.digits_logreg"
SOURCE = """
import math

import numpy as np
import torch
from torch import nn


def custom_model(feature_shape, num_classes):
    return nn.Linear(math.prod(feature_shape), num_classes)  # logistic regression


def loss(logits, labels):
    return nn.functional.cross_entropy(logits, labels)


def optimizer(lr):
    return "sgd"


def feed(x, y):
    flat = np.ascontiguousarray(x.reshape(len(x), -1))
    return torch.from_numpy(flat), torch.from_numpy(y)
"""


class Artifact:
    """The attributes of a KFP artifact the step uses."""

    def __init__(self, path: Path, metadata: dict[str, Any] | None = None) -> None:
        self.path = str(path)
        self.metadata: dict[str, Any] = dict(metadata or {})

    def log_metric(self, metric: str, value: float) -> None:
        self.metadata[metric] = value


def test_a_users_model_module_trains_on_the_parameter_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "image" / "team_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "digits_logreg.py").write_text(textwrap.dedent(SOURCE))
    # The pods import it from PYTHONPATH, as from the user's image; the step checks it from sys.path first.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "image"), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.syspath_prepend(str(tmp_path / "image"))
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    dataset = Artifact(tmp_path / "kfp" / "dataset")
    download_dataset_step(
        source="builtin:digits", sha256="", shards=2, workspace_pvc="ws", refresh=False, dataset=dataset
    )
    model, metrics, report = (
        Artifact(tmp_path / "kfp" / "model"),
        Artifact(tmp_path / "kfp" / "metrics"),
        Artifact(tmp_path / "kfp" / "report.html"),
    )

    job, status = train_ps(
        dataset=dataset, model=model, metrics=metrics, report=report, task_config=None,
        run_id="run-1", task_id="task-1", task_name="ps-train", workspace_pvc="ws",
        ps_replicas=1, workers=2, epochs=4, batch_size=32, optimizer="sgd", learning_rate=0.2,
        model_module=MODULE, timeout_seconds=240,
    )  # fmt: skip

    assert status == "Succeeded", job
    written = json.loads((Path(model.path) / "metrics.json").read_text())
    print(f"user model {MODULE} on the PS: test accuracy {written['test_accuracy']:.4f}")
    assert written["model"] == f"module:{MODULE}"  # the master trained the module, not the built-in mlp
    assert written["test_accuracy"] > 0.5, written  # ten classes: chance is 0.1
    assert metrics.metadata["test_accuracy"] == pytest.approx(written["test_accuracy"])
    assert model.metadata["architecture"] == MODULE
    described = json.loads((Path(model.path) / "model.json").read_text())
    assert set(described["dense"]) == {"net.weight", "net.bias"}, described  # the module's parameters


def test_a_worker_refuses_a_module_missing_the_contract_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the launcher cannot import the user's image: each worker checks the module itself, first."""
    from kubetrain.data.download import download
    from kubetrain.errors import ExitCode
    from kubetrain.ps.harness.localrun import LocalPSJob

    image = tmp_path / "image"
    image.mkdir()
    (image / "broken_model.py").write_text(textwrap.dedent(SOURCE).replace("def loss(", "def criterion("))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(image), os.environ.get("PYTHONPATH")])))
    data = tmp_path / "digits"
    download("builtin:digits", data, shards=2, quiet=True)
    with LocalPSJob(
        workdir=tmp_path / "run",
        data=data,
        num_ps=1,
        num_workers=1,
        master_args=["--model-module", "broken_model"],
        ps_args=["--optimizer", "sgd", "--lr", "0.2"],
        worker_args=["--optimizer", "sgd", "--lr", "0.2"],
    ) as job:
        job.start_all()
        rc = job.wait_exit("worker", 0, deadline_s=120)
        log = job.tail("worker", 0)
        trained = job.trained_lines()
    assert rc == ExitCode.INVALID_INPUT, log
    assert "model module broken_model does not meet kubetrain's model contract: missing loss(logits, labels)" in log
    assert trained == 0  # nothing was trained with it
