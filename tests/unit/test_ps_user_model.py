"""A user's model module on the parameter servers: the contract, its errors, and the request that names it."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.frameworks import PSRequest
from kubetrain.kfp_runtime.request_base import JobPlan
from kubetrain.manifests import build_manifest
from kubetrain.presets import PodOptions, TrainingParams
from kubetrain.ps.common.model_names import is_module_path, user_model_ref, user_module_of
from kubetrain.ps.common.optimizers import OptimizerSpec
from kubetrain.ps.worker.user_model import UserModel, UserModelError, build_user_model, load_contract
from kubetrain.specs import PSJobSpec
from tests.crd_schema import validate_strict
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "ps-train"}
SGD = OptimizerSpec(name="sgd", lr=0.1)
X = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32)
Y = np.array([3, 7], dtype=np.int64)

LOGISTIC = """
import math
import torch
from torch import nn

def custom_model(feature_shape, num_classes):
    return nn.Linear(math.prod(feature_shape), num_classes)

def loss(logits, labels):
    return nn.functional.cross_entropy(logits, labels)

def optimizer(lr):
    return "sgd"

def feed(x, y):
    return torch.from_numpy(x).reshape(len(x), -1), torch.from_numpy(y)
"""


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path for the test's model modules."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def write_module(directory: Path, source: str) -> str:
    """A model module with a name no other test uses (imports are cached per process)."""
    name = f"user_model_{uuid.uuid4().hex[:12]}"
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def test_a_module_that_meets_the_contract_trains_as_a_ps_model(module_dir: Path) -> None:
    contract = load_contract(write_module(module_dir, LOGISTIC), lr=0.1, servers=SGD)
    model = build_user_model(contract, feature_shape=(1, 8, 8), num_classes=10, seed=0, sample=(X, Y))
    assert isinstance(model, UserModel)
    assert [name for name, _ in model.named_parameters()] == ["net.weight", "net.bias"]  # dense, on the servers
    xb, yb = model.feed(X, Y)
    assert xb.shape == (2, 64)  # the module's feed, not kubetrain's
    with torch.no_grad():
        logits = model(xb, {})
        assert float(model.loss(logits, yb, reduction="sum")) == pytest.approx(2 * float(model.loss(logits, yb)))
    again = build_user_model(contract, feature_shape=(1, 8, 8), num_classes=10, seed=0, sample=(X, Y))
    assert torch.equal(again.net.weight, model.net.weight)  # seeded: every worker builds the same weights


def test_a_module_missing_the_contract_is_named_with_everything_it_lacks(module_dir: Path) -> None:
    name = write_module(
        module_dir,
        """
        def custom_model(shape):
            pass

        optimizer = "sgd"
        """,
    )
    with pytest.raises(UserModelError) as raised:
        load_contract(name, lr=0.1, servers=SGD)
    message = str(raised.value)
    assert message.startswith(f"model module {name} does not meet kubetrain's model contract")
    assert "custom_model cannot be called as custom_model(feature_shape, num_classes)" in message
    assert "missing loss(logits, labels)" in message
    assert "optimizer is a str, not a function optimizer(lr)" in message
    assert "missing feed(x, y)" in message
    assert "Your own model on the parameter servers" in message  # where the contract is written down


@pytest.mark.parametrize(
    ("source_change", "message"),
    [
        (("return \"sgd\"", "return \"adam\""), r"optimizer\(lr=0\.1\) gives OptimizerSpec\(name='adam'.* but the parameter servers apply OptimizerSpec\(name='sgd'"),
        (("return \"sgd\"", "return \"rmsprop\""), r"optimizer\(lr=0\.1\) failed: SpecError: optimizer: got 'rmsprop'"),
        (("import math", "import math\nimport not_installed_anywhere"), r"importing it failed: ModuleNotFoundError: No module named 'not_installed_anywhere'"),
    ],
)  # fmt: skip
def test_the_optimizer_and_the_imports_are_checked(
    module_dir: Path, source_change: tuple[str, str], message: str
) -> None:
    name = write_module(module_dir, LOGISTIC.replace(*source_change))
    with pytest.raises(UserModelError, match=message):
        load_contract(name, lr=0.1, servers=SGD)


def test_a_module_that_is_not_there_is_named() -> None:
    with pytest.raises(UserModelError, match=r"model module no_such_team\.model: no module named 'no_such_team'"):
        load_contract("no_such_team.model", lr=0.1, servers=None)


@pytest.mark.parametrize(
    ("source_change", "message"),
    [
        (("return torch.from_numpy(x).reshape(len(x), -1), torch.from_numpy(y)", "return x, y"), r"feed\(x, y\) failed on 2 records of the training data: TypeError: returned tuple"),
        (("return nn.Linear(math.prod(feature_shape), num_classes)", "return nn.Linear(math.prod(feature_shape), 3)"), r"forward\(x\) failed on 2 records.*logits shaped \(2, 3\); expected \(2, 10\)"),
        (("return nn.functional.cross_entropy(logits, labels)", "return nn.functional.cross_entropy(logits, labels, reduction='none')"), r"loss\(logits, labels\) failed.*expected a finite scalar"),
        (("return nn.Linear(math.prod(feature_shape), num_classes)", "return 'linear'"), r"custom_model returned str; expected a torch.nn.Module"),
    ],
)  # fmt: skip
def test_the_model_is_tried_on_a_few_records_before_any_training(
    module_dir: Path, source_change: tuple[str, str], message: str
) -> None:
    contract = load_contract(write_module(module_dir, LOGISTIC.replace(*source_change)), lr=0.1, servers=SGD)
    with pytest.raises(UserModelError, match=message):
        build_user_model(contract, feature_shape=(1, 8, 8), num_classes=10, seed=0, sample=(X, Y))


def test_the_master_tells_workers_a_module_apart_from_a_built_in_model() -> None:
    assert user_model_ref("mlp") == "module:mlp" and user_module_of("module:mlp") == "mlp"
    assert user_module_of("mlp") is None  # the built-in one
    assert is_module_path("my_team.ctr_model") and is_module_path("ctr")
    for bad in ("my-team.model", "my_team..model", "class.model", "", "/app/model.py"):
        assert not is_module_path(bad), bad


def test_the_request_validates_the_module_and_puts_it_on_the_master_and_workers() -> None:
    with pytest.raises(InvalidInputError, match=r"model_module: got 'my-team/ctr.py'; expected an importable module"):
        PSRequest(**IDS, model_module="my-team/ctr.py")
    with pytest.raises(InvalidInputError, match=r"architecture: got 'wide_deep' with model_module='my_team.ctr'"):
        PSRequest(**IDS, model_module="my_team.ctr", architecture="wide_deep")
    plan = JobPlan(name="ps-0123456789ab", params=TrainingParams(lr=0.05), pod=PodOptions())
    request = PSRequest(**IDS, model_module="my_team.ctr", optimizer="sgd", learning_rate=0.05)
    assert request.model_name == "my_team.ctr"
    spec = request.to_spec(plan)
    assert isinstance(spec, PSJobSpec)
    master, worker = list(spec.master.args), list(spec.worker.args)
    assert master[master.index("--model-module") + 1] == "my_team.ctr"
    assert worker[worker.index("--optimizer") + 1 :][:3] == ["sgd", "--lr", "0.05"]  # what the servers apply
    validate_strict(build_manifest(spec))
    plain = PSRequest(**IDS).to_spec(plan)
    assert isinstance(plain, PSJobSpec)
    assert "--model-module" not in plain.master.args and "--optimizer" not in plain.worker.args  # as before


def test_the_step_refuses_a_module_missing_the_contract_before_anything_is_submitted(
    module_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the local backend the pods import from this machine's Python, so the step checks the module first."""
    from kubetrain.kfp_runtime import train_step

    class Artifact:
        def __init__(self, name: str, metadata: dict[str, Any] | None = None) -> None:
            self.path = str(tmp_path / name)
            self.metadata: dict[str, Any] = metadata or {}

        def log_metric(self, metric: str, value: float) -> None:
            raise AssertionError("nothing to log")

    def no_backend(*args: object, **kwargs: object) -> None:
        raise AssertionError("a backend was opened: something would have been submitted")

    name = write_module(module_dir, LOGISTIC.replace("def feed(x, y):", "def fed(x, y):"))
    monkeypatch.setenv("KUBETRAIN_BACKEND", "local")
    monkeypatch.setenv("KUBETRAIN_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setattr(train_step, "open_backend", no_backend)
    outputs = train_step.StepArtifacts(
        dataset=Artifact("d", {"path": "/workspace/datasets/digits"}),
        model=Artifact("m"),
        metrics=Artifact("x"),
        report=Artifact("r"),
    )
    request = PSRequest(**IDS, model_module=name, optimizer="sgd", learning_rate=0.1)
    with pytest.raises(UserModelError, match=rf"model module {name} does not meet .*: missing feed\(x, y\)\."):
        train_step.launch_training(request, outputs=outputs, task_config=None)
