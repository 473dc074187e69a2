"""A pipeline of a user's own programs and steps around kubetrain's components.

download_dataset → a step of the user's that reads the data set → the user's DDP script
(pytorch_train), ChainerMN script (chainermn_train) and PS model module (ps_train) → one step per
framework that loads the trained model and scores it on the test split.

`make_pipeline(program_dir)` names where the programs lie: in the training images on a cluster
(e.g. /app), this directory on one machine. tests/e2e/test_user_guide.py runs it locally.
"""

# No `from __future__ import annotations`: KFP reads component signatures as real types.
from typing import Any

from kfp import dsl, kubernetes
from kfp.dsl import Dataset, Input, Model

import kubetrain.components

COMPONENTS = kubetrain.components.compiled_yaml()  # name -> the installed YAML; or the YAML's URLs
# The user's steps need kfp, kubetrain and the framework they load; kubetrain's training images
# plus kfp make such an image. Locally (kfp.local) the image is not used.
STEP_IMAGE = "registry.example.com/team/steps:1"
WORKSPACE = "/workspace"


@dsl.component(base_image=STEP_IMAGE, install_kfp_package=False)
def inspect_dataset(dataset: Input[Dataset]) -> int:
    """The user's own step: read the downloaded data set; returns the number of training records."""
    from kubetrain.data.dataset_format import load_split, read_dataset_info
    from kubetrain.kfp_runtime.workspace import dataset_dir

    directory = dataset_dir(dataset)  # /workspace/datasets/... on a cluster, the claim's directory here
    info = read_dataset_info(directory)
    x, y = load_split(directory, "train")
    print(f"{info.name}: x {x.dtype}{x.shape}, y {y.dtype}{y.shape}, {info.num_classes} classes", flush=True)
    return len(y)


@dsl.component(base_image=STEP_IMAGE, install_kfp_package=False)
def score_torch_model(model: Input[Model], dataset: Input[Dataset]) -> float:
    """Load the DDP script's model.pt and return its test accuracy."""
    import json
    import os

    import torch
    from torch import nn

    from kubetrain.data.dataset_format import load_split
    from kubetrain.kfp_runtime.workspace import dataset_dir

    with open(os.path.join(model.path, "model.json")) as f:
        shape = json.load(f)
    net = nn.Linear(shape["in_features"], shape["num_classes"])
    net.load_state_dict(torch.load(os.path.join(model.path, "model.pt"), weights_only=True))
    x, y = load_split(dataset_dir(dataset), "test")
    with torch.no_grad():
        predicted = net(torch.from_numpy(x.reshape(len(x), -1))).argmax(1).numpy()
    return float((predicted == y).mean())


@dsl.component(base_image=STEP_IMAGE, install_kfp_package=False)
def score_chainer_model(model: Input[Model], dataset: Input[Dataset]) -> float:
    """Load the ChainerMN script's model.npz and return its test accuracy."""
    import json
    import os

    from kubetrain.data.dataset_format import load_split
    from kubetrain.kfp_runtime.workspace import dataset_dir
    from kubetrain.train.chainer_models import chainer  # Chainer, importable without SETUPTOOLS_USE_DISTUTILS

    class Net(chainer.Chain):  # the script's class, as save_npz saw it
        # No annotations here: a component's source runs on its own, without this module's imports.
        def __init__(self, in_features, num_classes):  # type: ignore[no-untyped-def]
            super().__init__()
            with self.init_scope():
                self.fc = chainer.links.Linear(in_features, num_classes)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.fc(x)

    with open(os.path.join(model.path, "model.json")) as f:
        shape = json.load(f)
    net = Net(shape["in_features"], shape["num_classes"])
    chainer.serializers.load_npz(os.path.join(model.path, "model.npz"), net)
    x, y = load_split(dataset_dir(dataset), "test")
    with chainer.using_config("train", False), chainer.no_backprop_mode():
        predicted = net(x.reshape(len(x), -1)).array.argmax(1)
    return float((predicted == y).mean())


@dsl.component(base_image=STEP_IMAGE, install_kfp_package=False)
def score_ps_model(model: Input[Model], dataset: Input[Dataset], model_module: str) -> float:
    """Rebuild the PS model from the user's module, load model.npz into it, return its test accuracy."""
    import importlib
    import os

    import numpy as np
    import torch

    from kubetrain.data.dataset_format import load_split, read_dataset_info
    from kubetrain.kfp_runtime.workspace import dataset_dir

    directory = dataset_dir(dataset)
    info = read_dataset_info(directory)
    net = importlib.import_module(model_module).custom_model(info.feature_shape, info.num_classes)
    with np.load(os.path.join(model.path, "model.npz")) as npz:
        # One array per parameter: dense/net.<name> (kubetrain's workers hold the module as `net`).
        state = {k.removeprefix("dense/net."): torch.from_numpy(npz[k]) for k in npz.files if k.startswith("dense/")}
    net.load_state_dict(state)
    x, y = load_split(directory, "test")
    with torch.no_grad():
        predicted = net(torch.from_numpy(x.reshape(len(x), -1))).argmax(1).numpy()
    return float((predicted == y).mean())


def make_pipeline(program_dir: str) -> Any:
    """The pipeline, its programs taken from `program_dir` (where they lie in the training pods)."""
    download = kubetrain.components.load_component(str(COMPONENTS["download_dataset"]))
    pytorch_train = kubetrain.components.load_component(str(COMPONENTS["pytorch_train"]))
    chainermn_train = kubetrain.components.load_component(str(COMPONENTS["chainermn_train"]))
    ps_train = kubetrain.components.load_component(str(COMPONENTS["ps_train"]))

    @dsl.pipeline(name="user-programs")
    def user_programs(claim: str = "kubetrain-workspace"):  # type: ignore[no-untyped-def]
        data = download(workspace_pvc=claim)
        dataset = data.outputs["dataset"]
        look = inspect_dataset(dataset=dataset)
        torch_job = pytorch_train(
            dataset=dataset, workspace_pvc=claim, workers=1,
            command=["python", f"{program_dir}/ddp_train.py"], args=["--epochs", "4"],
        )  # fmt: skip
        chainer_job = chainermn_train(
            dataset=dataset, workspace_pvc=claim, workers=2,
            command=["python", f"{program_dir}/chainermn_train.py"], args=["--epochs", "4"],
        )  # fmt: skip
        ps_job = ps_train(
            dataset=dataset, workspace_pvc=claim, workers=2, ps_replicas=1,
            model_module="digits_ps_model", optimizer="sgd", learning_rate=0.2, epochs=4,
        )  # fmt: skip
        scores = [
            score_torch_model(model=torch_job.outputs["model"], dataset=dataset),
            score_chainer_model(model=chainer_job.outputs["model"], dataset=dataset),
            score_ps_model(model=ps_job.outputs["model"], dataset=dataset, model_module="digits_ps_model"),
        ]
        # On a cluster, every step that reads /workspace mounts the claim there, and none is cached
        # (a cache hit would skip a job, or read a data set that is no longer there).
        for task in (data, look, torch_job, chainer_job, ps_job, *scores):
            kubernetes.mount_pvc(task, pvc_name=claim, mount_path=WORKSPACE)
            task.set_caching_options(False)

    return user_programs
