"""Objects the harness creates in the cluster, as pure builders."""

from __future__ import annotations

import yaml


def workspace_claim(namespace: str, claim: str, *, host_path: str, size: str, storage_class: str,
                    path_must_exist: bool) -> str:  # fmt: skip
    """A ReadWriteMany claim bound to a static hostPath volume of its own (the real PV controller binds them).

    `path_must_exist` makes the kubelet refuse a pod whose directory is missing instead of creating it.
    """
    host = {"path": host_path, **({"type": "Directory"} if path_must_exist else {})}
    volume = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-workspace"},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": host,
                 "claimRef": {"namespace": namespace, "name": claim}},
    }  # fmt: skip
    bound = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "volumeName": f"{namespace}-workspace", "resources": {"requests": {"storage": size}}},
    }  # fmt: skip
    return yaml.safe_dump_all([volume, bound])
