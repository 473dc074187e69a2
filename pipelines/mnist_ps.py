"""`mnist_ps`: download a data set, then train on it with kubetrain's parameter servers in a JobSet."""

from kfp import dsl

from kubetrain.components import ps_train
from kubetrain.pipelines._download import download_task
from kubetrain.pipelines._workspace import launcher_task


# KFP's decorator is untyped.
@dsl.pipeline(name="mnist-ps")  # type: ignore[untyped-decorator]
def mnist_ps(
    dataset: str = "builtin:digits",
    workspace_pvc: str = "kubetrain-workspace",
    refresh_dataset: bool = False,
    ps_replicas: int = 2,
    workers: int = 3,
    mode: str = "async",
    epochs: int = 10,
    batch_size: int = 32,
    learning_rate: float = 0.002,
    architecture: str = "mlp",
    timeout_seconds: int = 86400,
) -> None:
    """Download a data set, then train on it with parameter servers (a JobSet: master, servers, workers).

    Args:
        dataset: builtin:digits (no network), or a URL of MNIST-format files or an .npz.
        workspace_pvc: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
        refresh_dataset: Download the data set again (a URL with no checksum is otherwise reused from
            KFP's cache and the claim); a run with it misses KFP's cache, however it was submitted.
        ps_replicas: Parameter servers (parameter shards).
        workers: Worker pods.
        mode: async or sync gradient application.
        epochs: Passes over the training data (asynchronous updates need more than DDP's 5).
        batch_size: Records per worker step.
        learning_rate: Learning rate of the parameter servers' optimizer.
        architecture: Model: mlp or cnn.
        timeout_seconds: Limit on the training job; then it is deleted and the run fails.
    """
    data = download_task(source=dataset, workspace_pvc=workspace_pvc, refresh=refresh_dataset)
    launcher_task(
        ps_train(
            dataset=data.outputs["dataset"],
            workspace_pvc=workspace_pvc,
            ps_replicas=ps_replicas,
            workers=workers,
            mode=mode,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            architecture=architecture,
            timeout_seconds=timeout_seconds,
        ),
        workspace_pvc=workspace_pvc,
    )
