"""download_dataset: fetch the built-in digits (no network) or MNIST onto the workspace claim."""

from kfp import dsl, kubernetes

from kubetrain.components import download_dataset


@dsl.pipeline(name="download-dataset-example")
def download_example(source: str = "builtin:digits", claim: str = "kubetrain-workspace") -> None:
    """Fetch a data set onto the workspace claim.

    Args:
        source: builtin:digits, or a URL of MNIST-format files or an .npz.
        claim: ReadWriteMany PersistentVolumeClaim the data lands on.
    """
    task = download_dataset(source=source, workspace_pvc=claim)
    kubernetes.mount_pvc(task, pvc_name=claim, mount_path="/workspace")
