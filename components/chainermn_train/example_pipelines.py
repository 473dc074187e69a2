"""chainermn_train: ChainerMN over MPI in an MPIJob."""

from kfp import dsl, kubernetes

from kubetrain.components import chainermn_train, download_dataset


@dsl.pipeline(name="chainermn-train-example")
def chainermn_example(claim: str = "kubetrain-workspace", workers: int = 2) -> None:
    """Train with ChainerMN on `workers` MPI workers.

    Args:
        claim: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
        workers: MPI worker pods.
    """
    data = download_dataset(source="builtin:digits", workspace_pvc=claim)
    train = chainermn_train(dataset=data.outputs["dataset"], workspace_pvc=claim, workers=workers, epochs=5)
    for task in (data, train):
        kubernetes.mount_pvc(task, pvc_name=claim, mount_path="/workspace")
        task.set_caching_options(False)
