"""`compare_frameworks`: one data set, three frameworks in parallel, one comparison table."""

from kfp import dsl

from kubetrain.components import chainermn_train, compare_summary, ps_train, pytorch_train
from kubetrain.pipelines._download import download_task
from kubetrain.pipelines._workspace import launcher_request, launcher_task


# KFP's decorator is untyped.
@dsl.pipeline(name="compare-frameworks")  # type: ignore[untyped-decorator]
def compare_frameworks(
    dataset: str = "builtin:digits",
    workspace_pvc: str = "kubetrain-workspace",
    refresh_dataset: bool = False,
    pytorch_epochs: int = 5,
    chainermn_epochs: int = 5,
    ps_epochs: int = 10,
    architecture: str = "mlp",
    timeout_seconds: int = 86400,
) -> None:
    """Download once, train with PyTorch DDP, ChainerMN and parameter servers in parallel, compare.

    Args:
        dataset: builtin:digits (no network), or a URL of MNIST-format files or an .npz.
        workspace_pvc: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
        refresh_dataset: Download the data set again (a URL with no checksum is otherwise reused from
            KFP's cache and the claim); a run with it misses KFP's cache, however it was submitted.
        pytorch_epochs: Epochs of the PyTorch DDP job.
        chainermn_epochs: Epochs of the ChainerMN job.
        ps_epochs: Epochs (passes over the data) of the parameter-server job (asynchronous updates
            need more than DDP's 5).
        architecture: Model of all three: mlp or cnn.
        timeout_seconds: Limit on each training job; then it is deleted and the run fails.
    """
    data = download_task(source=dataset, workspace_pvc=workspace_pvc, refresh=refresh_dataset)
    shared = {
        "dataset": data.outputs["dataset"],
        "workspace_pvc": workspace_pvc,
        "architecture": architecture,
        "timeout_seconds": timeout_seconds,
    }
    torch_run = launcher_task(pytorch_train(epochs=pytorch_epochs, **shared), workspace_pvc=workspace_pvc)
    mpi_run = launcher_task(chainermn_train(epochs=chainermn_epochs, **shared), workspace_pvc=workspace_pvc)
    ps_run = launcher_task(ps_train(epochs=ps_epochs, **shared), workspace_pvc=workspace_pvc)
    summary = compare_summary(
        pytorch_model=torch_run.outputs["model"],
        pytorch_metrics=torch_run.outputs["metrics"],
        chainermn_model=mpi_run.outputs["model"],
        chainermn_metrics=mpi_run.outputs["metrics"],
        ps_model=ps_run.outputs["model"],
        ps_metrics=ps_run.outputs["metrics"],
    )
    launcher_request(summary)
