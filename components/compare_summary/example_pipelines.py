"""compare_summary: the three frameworks' runs in one table."""

from kfp import dsl, kubernetes

from kubetrain.components import chainermn_train, compare_summary, download_dataset, ps_train, pytorch_train


@dsl.pipeline(name="compare-summary-example")
def compare_example(claim: str = "kubetrain-workspace") -> None:
    """Train with each framework on the same data, then compare.

    Args:
        claim: ReadWriteMany PersistentVolumeClaim shared by the steps and the training pods.
    """
    data = download_dataset(source="builtin:digits", workspace_pvc=claim)
    runs = {
        name: train(dataset=data.outputs["dataset"], workspace_pvc=claim)
        for name, train in (("pytorch", pytorch_train), ("chainermn", chainermn_train), ("ps", ps_train))
    }
    for task in (data, *runs.values()):
        kubernetes.mount_pvc(task, pvc_name=claim, mount_path="/workspace")
        task.set_caching_options(False)
    compare_summary(**{f"{n}_{kind}": t.outputs[kind] for n, t in runs.items() for kind in ("model", "metrics")})
