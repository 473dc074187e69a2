"""The local backend accepts builders' and hand-written manifests and refuses broken ones by field path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kubetrain.backends.local.validate import go_quote, validate_manifest
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
        (_ps, _set(["spec", "failurePolicy", "rules"], [{"name": "Boom", "action": "Explode"}]), "rules[0].action"),
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


def _with_volume(volume: dict[str, Any], mount: dict[str, Any], *, name: str = "data") -> dict[str, Any]:
    manifest = _pytorch()
    spec = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    spec["volumes"] = [{"name": name, **volume}]
    spec["containers"][0]["volumeMounts"] = [{"name": name, **mount}]
    return manifest


MASTER_POD = "spec.pytorchReplicaSpecs.Master.template.spec"
# The API server's messages, word for word and byte for byte: printed by apimachinery v0.36.3's
# field.Invalid(...).Error() with validation.IsDNS1123Label / IsDNS1123Subdomain.
LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


@pytest.mark.parametrize(
    ("volume", "mount", "message"),
    [
        (
            {"persistentVolumeClaim": {"claimName": "../../../../tmp/x"}},
            {"mountPath": "/data"},
            'persistentVolumeClaim.claimName: Invalid value: "../../../../tmp/x": no PersistentVolumeClaim can have '
            f"this name (the API server refuses it as a claim's metadata.name: {SUBDOMAIN_RULE}); name an existing claim",
        ),
        ({"persistentVolumeClaim": {"claimName": ""}}, {"mountPath": "/d"}, "claimName: Required value"),
        (
            {"emptyDir": {}},
            {"mountPath": "/d", "subPath": "../../x"},
            'subPath: Invalid value: "../../x": must not contain',
        ),
        (
            {"emptyDir": {}},
            {"mountPath": "/d", "subPath": "/etc"},
            'subPath: Invalid value: "/etc": must be a relative path',
        ),
        (
            {"emptyDir": {}},
            {"mountPath": "/"},
            'mountPath: Invalid value: "/": a volume cannot be mounted over the root',
        ),
        (
            {"secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]}},
            {"mountPath": "/s"},
            """secret.items[0].path: Invalid value: "../k": must not contain '..'""",
        ),
        (
            {"configMap": {"name": "c", "items": [{"key": "k", "path": "..data"}]}},
            {"mountPath": "/c"},
            """configMap.items[0].path: Invalid value: "..data": must not start with '..'""",
        ),
        ({"configMap": {"name": "c", "items": [{"key": "k"}]}}, {"mountPath": "/c"}, "items[0].path: Required value"),
    ],
)
def test_paths_that_would_leave_the_local_root_are_refused_as_the_api_server_does(
    volume: dict[str, Any], mount: dict[str, Any], message: str
) -> None:
    with pytest.raises(ManifestError) as refused:
        validate_manifest(_with_volume(volume, mount))
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        # An emptyDir is a directory named after its volume: this one made a replica write outside the root.
        ("../../../../tmp/x/ESCAPED", LABEL_RULE),
        ("scratch.tmp", "must not contain dots"),
        ("a" * 64, "must be no more than 63 characters"),
        ("Data", LABEL_RULE),
        ("data\n", LABEL_RULE),  # Python's `$` would let a trailing newline through
    ],
)
def test_volume_names_must_be_rfc_1123_labels_as_the_api_server_says(name: str, problem: str) -> None:
    with pytest.raises(ManifestError) as refused:
        validate_manifest(_with_volume({"emptyDir": {}}, {"mountPath": "/scratch"}, name=name))
    quoted = name.replace("\n", "\\n")
    assert str(refused.value) == f'{MASTER_POD}.volumes[0].name: Invalid value: "{quoted}": {problem}'


def test_volume_names_are_required_and_unique() -> None:
    manifest = _with_volume({"emptyDir": {}}, {"mountPath": "/scratch"})
    spec = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    spec["volumes"].append({"name": "data", "emptyDir": {}})
    with pytest.raises(ManifestError, match=r'volumes\[1\]\.name: Duplicate value: "data"$'):
        validate_manifest(manifest)
    spec["volumes"] = [{"emptyDir": {}}]
    with pytest.raises(ManifestError, match=r"volumes\[0\]\.name: Required value$"):
        validate_manifest(manifest)


def test_bad_values_are_quoted_as_gos_percent_q() -> None:
    """Byte for byte what the API server printed for the same value (strconv.Quote)."""
    value = 'tab\there\x01\x7f é "q" \\ \u00a0 \U0001f600 \U000e0001'
    # Go's fmt.Printf("%q") of the same string; the emoji is printable, the language tag is not.
    assert go_quote(value) == r'"tab\there\x01\x7f é \"q\" \\ \u00a0 ' + "\U0001f600" + r' \U000e0001"'


def test_local_runs_follow_the_clusters_name_rule() -> None:
    """A 63-character name fits DNS-1035 but not the operator's `<name>-master-0`: refused here too."""
    manifest = _pytorch()
    manifest["metadata"]["name"] = "a" * 63
    with pytest.raises(ManifestError, match=r"too long: the operator derives 'a{63}-master-0'"):
        validate_manifest(manifest)
