"""pytorch_train: DDP in a PyTorchJob, then one job per learning rate in a ParallelFor."""

from kfp import dsl, kubernetes

from kubetrain.components import download_dataset, pytorch_train


def _claimed(task: dsl.PipelineTask, claim: str) -> dsl.PipelineTask:
    kubernetes.mount_pvc(task, pvc_name=claim, mount_path="/workspace")
    return task.set_caching_options(False)  # a cache hit would skip the job


@dsl.pipeline(name="pytorch-train-example")
def pytorch_example(claim: str = "kubetrain-workspace", workers: int = 1) -> None:
    """Train with DDP on one master and `workers` workers, then sweep the learning rate.

    Args:
        claim: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
        workers: Worker replicas besides the master.
    """
    data = _claimed(download_dataset(source="builtin:digits", workspace_pvc=claim), claim)
    _claimed(pytorch_train(dataset=data.outputs["dataset"], workspace_pvc=claim, workers=workers, epochs=5), claim)
    with dsl.ParallelFor([0.001, 0.01]) as lr:  # each iteration gets its own job
        _claimed(pytorch_train(dataset=data.outputs["dataset"], workspace_pvc=claim, learning_rate=lr), claim)
