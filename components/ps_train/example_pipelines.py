"""ps_train: parameter-server training in a JobSet (master, parameter servers, workers)."""

from kfp import dsl, kubernetes

from kubetrain.components import download_dataset, ps_train


@dsl.pipeline(name="ps-train-example")
def ps_example(claim: str = "kubetrain-workspace", ps_replicas: int = 2, workers: int = 2) -> None:
    """Train on `ps_replicas` parameter servers and `workers` workers.

    Args:
        claim: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
        ps_replicas: Parameter-server pods holding the sharded parameters.
        workers: Worker pods pulling parameters and pushing gradients.
    """
    data = download_dataset(source="builtin:digits", workspace_pvc=claim)
    train = ps_train(
        dataset=data.outputs["dataset"], workspace_pvc=claim, ps_replicas=ps_replicas, workers=workers, epochs=10
    )
    for task in (data, train):
        kubernetes.mount_pvc(task, pvc_name=claim, mount_path="/workspace")
        task.set_caching_options(False)
