"""`mnist_pytorch`: download a data set, then train on it with PyTorch DDP in a PyTorchJob."""

from kfp import dsl

from kubetrain.components import pytorch_train
from kubetrain.pipelines._download import download_task
from kubetrain.pipelines._workspace import launcher_task


# KFP's decorator is untyped.
@dsl.pipeline(name="mnist-pytorch")  # type: ignore[untyped-decorator]
def mnist_pytorch(
    dataset: str = "builtin:digits",
    workspace_pvc: str = "kubetrain-workspace",
    refresh_dataset: bool = False,
    workers: int = 1,
    epochs: int = 5,
    batch_size: int = 32,
    learning_rate: float = 0.002,
    architecture: str = "mlp",
    timeout_seconds: int = 86400,
    job_api: str = "pytorchjob",
) -> None:
    """Download a data set, then train on it with PyTorch DDP (a PyTorchJob: master + workers).

    Args:
        dataset: builtin:digits (no network), or a URL of MNIST-format files or an .npz.
        workspace_pvc: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
        refresh_dataset: Download the data set again (a URL with no checksum is otherwise reused from
            KFP's cache and the claim); a run with it misses KFP's cache, however it was submitted.
        workers: Worker replicas besides the master.
        epochs: Training epochs.
        batch_size: Records per process per step.
        learning_rate: Adam learning rate.
        architecture: Model: mlp or cnn.
        timeout_seconds: Limit on the training job; then it is deleted and the run fails.
        job_api: pytorchjob (training-operator v1) or trainjob (Kubeflow Trainer v2, torch-distributed).
    """
    data = download_task(source=dataset, workspace_pvc=workspace_pvc, refresh=refresh_dataset)
    launcher_task(
        pytorch_train(
            dataset=data.outputs["dataset"],
            workspace_pvc=workspace_pvc,
            workers=workers,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            architecture=architecture,
            timeout_seconds=timeout_seconds,
            job_api=job_api,
        ),
        workspace_pvc=workspace_pvc,
    )
