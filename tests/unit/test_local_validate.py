"""The local backend accepts builders' and hand-written manifests and refuses broken ones by field path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kubetrain.backends.local.validate import validate_manifest
from kubetrain.errors import ManifestError
from kubetrain.manifests import build_mpijob, build_ps_jobset, build_pytorchjob
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB
from kubetrain.specs import JobMeta, MPIJobSpec, PSJobSpec, PyTorchJobSpec
from kubetrain.specs.common import ReplicaSpec, Workspace

Manifest = dict[str, Any]
R = ReplicaSpec(image="img", command=("python", "x.py"))
WS = Workspace(claim_name="work")


def _pytorch() -> Manifest:
    return build_pytorchjob(
        PyTorchJobSpec(meta=JobMeta(name="tj"), master=R, worker=ReplicaSpec(image="i", replicas=2), workspace=WS)
    )


def _mpi() -> Manifest:
    return build_mpijob(MPIJobSpec(meta=JobMeta(name="mj"), launcher=R, worker=ReplicaSpec(image="i", replicas=2)))


def _ps() -> Manifest:
    return build_ps_jobset(
        PSJobSpec(meta=JobMeta(name="pj"), master=R, ps=ReplicaSpec(image="i", replicas=2), worker=R, workspace=WS)
    )


def test_builders_manifests_are_accepted() -> None:
    assert validate_manifest(_pytorch()) is PYTORCHJOB
    assert validate_manifest(_mpi()) is MPIJOB
    assert validate_manifest(_ps()) is JOBSET


def test_a_minimal_hand_written_manifest_is_accepted() -> None:
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "hand"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}
            }
        },
    }
    assert validate_manifest(manifest) is PYTORCHJOB


def _set(path: list[Any], value: Any) -> Callable[[Manifest], None]:
    def apply(m: Manifest) -> None:
        node = m
        for key in path[:-1]:
            node = node[key]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return apply


PT = ["spec", "pytorchReplicaSpecs"]
PT_POD = [*PT, "Worker", "template", "spec"]
JS = ["spec", "replicatedJobs"]


@pytest.mark.parametrize(
    ("build", "mutate", "path"),
    [
        (_pytorch, _set(["metadata", "name"], "Bad_Name"), "metadata.name"),
        (_pytorch, _set([*PT, "Master", "replicas"], KeyError), "spec.pytorchReplicaSpecs.Master.replicas"),
        (_pytorch, _set([*PT, "Chief"], {"replicas": 1}), "spec.pytorchReplicaSpecs"),
        (
            _pytorch,
            _set([*PT, "Worker", "restartPolicy"], "Sometimes"),
            "spec.pytorchReplicaSpecs.Worker.restartPolicy",
        ),
        (_pytorch, _set([*PT_POD, "containers", 0, "image"], ""), "spec.pytorchReplicaSpecs.Worker.template.spec"),
        (_pytorch, _set([*PT_POD, "containers", 0, "name"], "main"), "spec.pytorchReplicaSpecs.Worker.template.spec"),
        (_pytorch, _set([*PT_POD, "volumes"], []), "volumeMounts[0].name"),
        (_pytorch, _set(["spec", "runPolicy", "backoffLimit"], -1), "spec.runPolicy.backoffLimit"),
        (_mpi, _set(["spec", "mpiReplicaSpecs", "Launcher", "restartPolicy"], "ExitCode"), "Launcher.restartPolicy"),
        (_mpi, _set(["spec", "mpiReplicaSpecs", "Launcher", "replicas"], 2), "Launcher.replicas"),
        (_mpi, _set(["spec", "slotsPerWorker"], 0), "spec.slotsPerWorker"),
        (_ps, _set([*JS, 1, "dependsOn"], [{"name": "worker", "status": "Ready"}]), "replicatedJobs[ps].dependsOn"),
        (_ps, _set([*JS, 1, "dependsOn"], [{"name": "master", "status": "Started"}]), "dependsOn[0].status"),
        (_ps, _set(["spec", "startupPolicy"], {"startupPolicyOrder": "InOrder"}), "spec.startupPolicy"),
        (_ps, _set(["spec", "successPolicy", "targetReplicatedJobs"], ["chief"]), "targetReplicatedJobs"),
        (_ps, _set(["spec", "failurePolicy", "rules"], [{"action": "Explode"}]), "rules[0].action"),
        (_ps, _set([*JS, 2, "template", "spec", "template", "spec", "restartPolicy"], "Always"), "restartPolicy"),
        (_ps, _set([*JS, 0, "name"], "ps"), "spec.replicatedJobs[ps].name"),
    ],
)
def test_broken_manifests_name_the_field(
    build: Callable[[], Manifest], mutate: Callable[[Manifest], None], path: str
) -> None:
    manifest = copy.deepcopy(build())
    mutate(manifest)
    with pytest.raises(ManifestError) as err:
        validate_manifest(manifest)
    assert path in str(err.value)


def test_other_kinds_are_refused() -> None:
    with pytest.raises(ManifestError, match="TFJob"):
        validate_manifest({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t"}, "spec": {}})


def _with_volume(volume: dict[str, Any], mount: dict[str, Any]) -> dict[str, Any]:
    manifest = _pytorch()
    spec = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    spec["volumes"] = [{"name": "data", **volume}]
    spec["containers"][0]["volumeMounts"] = [{"name": "data", **mount}]
    return manifest


@pytest.mark.parametrize(
    ("volume", "mount", "message"),
    [
        (
            {"persistentVolumeClaim": {"claimName": "../../../../tmp/x"}},
            {"mountPath": "/data"},
            "persistentVolumeClaim.claimName: Invalid value: '../../../../tmp/x': a lowercase RFC 1123 subdomain",
        ),
        ({"emptyDir": {}}, {"mountPath": "/d", "subPath": "../../x"}, "subPath: Invalid value: '../../x': must not contain"),
        ({"emptyDir": {}}, {"mountPath": "/d", "subPath": "/etc"}, "subPath: Invalid value: '/etc': must be a relative path"),
        ({"emptyDir": {}}, {"mountPath": "/"}, 'mountPath: Invalid value: "/": a volume cannot be mounted over the root'),
        (
            {"secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]}},
            {"mountPath": "/s"},
            "secret.items[0].path: Invalid value: '../k': must not contain '..'",
        ),
    ],
)
def test_paths_that_would_leave_the_local_root_are_refused_as_the_api_server_does(
    volume: dict[str, Any], mount: dict[str, Any], message: str
) -> None:
    with pytest.raises(ManifestError) as refused:
        validate_manifest(_with_volume(volume, mount))
    assert message in str(refused.value)


def test_local_runs_follow_the_clusters_name_rule() -> None:
    """A 63-character name fits DNS-1035 but not the operator's `<name>-master-0`: refused here too."""
    manifest = _pytorch()
    manifest["metadata"]["name"] = "a" * 63
    with pytest.raises(ManifestError, match=r"too long: the operator derives 'a{63}-master-0'"):
        validate_manifest(manifest)
