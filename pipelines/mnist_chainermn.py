"""`mnist_chainermn`: download a data set, then train on it with ChainerMN in an MPIJob."""

from kfp import dsl

from kubetrain.components import chainermn_train
from kubetrain.pipelines._download import download_task
from kubetrain.pipelines._workspace import launcher_task


# KFP's decorator is untyped.
@dsl.pipeline(name="mnist-chainermn")  # type: ignore[untyped-decorator]
def mnist_chainermn(
    dataset: str = "builtin:digits",
    workspace_pvc: str = "kubetrain-workspace",
    refresh_dataset: bool = False,
    workers: int = 2,
    slots_per_worker: int = 1,
    epochs: int = 5,
    batch_size: int = 32,
    learning_rate: float = 0.002,
    architecture: str = "mlp",
    timeout_seconds: int = 86400,
    job_api: str = "mpijob",
) -> None:
    """Download a data set, then train on it with ChainerMN over MPI (an MPIJob: launcher + workers).

    Args:
        dataset: builtin:digits (no network), or a URL of MNIST-format files or an .npz.
        workspace_pvc: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
        refresh_dataset: Download the data set again (a URL with no checksum is otherwise reused from
            KFP's cache and the claim); a run with it misses KFP's cache, however it was submitted.
        workers: MPI worker pods.
        slots_per_worker: MPI ranks per worker pod.
        epochs: Training epochs.
        batch_size: Records per rank per step.
        learning_rate: Adam learning rate.
        architecture: Model: mlp or cnn.
        timeout_seconds: Limit on the training job; then it is deleted and the run fails.
        job_api: mpijob (mpi-operator) or trainjob (Kubeflow Trainer v2, the kubetrain-mpi runtime).
    """
    data = download_task(source=dataset, workspace_pvc=workspace_pvc, refresh=refresh_dataset)
    launcher_task(
        chainermn_train(
            dataset=data.outputs["dataset"],
            workspace_pvc=workspace_pvc,
            workers=workers,
            slots_per_worker=slots_per_worker,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            architecture=architecture,
            timeout_seconds=timeout_seconds,
            job_api=job_api,
        ),
        workspace_pvc=workspace_pvc,
    )
