"""What real clusters need on the training pods: labels, annotations, a priority class, node affinity.

From the component inputs (labels, annotations, priority_class) and the task's settings (node
affinity through the TaskConfig) to every pod of every job API: PyTorchJob, MPIJob, TrainJob (its
runtime patch) and the parameter-server JobSet.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.kfp_runtime.frameworks import ChainerMNRequest, PSRequest, PyTorchRequest
from kubetrain.kfp_runtime.request_base import JobPlan, TrainingRequest
from kubetrain.manifests import build_manifest
from kubetrain.manifests.jobset import NETWORK_POLICY_ANNOTATION
from kubetrain.presets import JobSettings, PodOptions, TrainingParams, pytorch_job_spec, pytorch_trainjob_spec
from kubetrain.specs import JobMeta, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm
from tests.crd_schema import validate_strict
from tests.unit.task_ids import TaskIds

IDS: TaskIds = {"run_id": "run-1", "task_id": "task-1", "task_name": "train"}
LABELS = {"kueue.x-k8s.io/queue-name": "team-a", "team": "vision"}
ANNOTATIONS = {"example.com/cost-centre": "ml research, 42"}
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}]
        }
    }
}


def pod_templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every pod template of a job manifest, by role (for a TrainJob: its runtime patch's)."""
    spec = manifest["spec"]
    kind = manifest["kind"]
    if kind == "PyTorchJob":
        return {role: r["template"] for role, r in spec["pytorchReplicaSpecs"].items()}
    if kind == "MPIJob":
        return {role: r["template"] for role, r in spec["mpiReplicaSpecs"].items()}
    if kind == "JobSet":
        return {r["name"]: r["template"]["spec"]["template"] for r in spec["replicatedJobs"]}
    assert kind == "TrainJob"
    (patch,) = spec["runtimePatches"]
    jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return {r["name"]: r["template"]["spec"]["template"] for r in jobs}


def _manifest(request: TrainingRequest) -> dict[str, Any]:
    pod = request.pod_options({"affinity": AFFINITY})
    manifest = build_manifest(request.to_spec(JobPlan(name="train-0123456789ab", params=TrainingParams(), pod=pod)))
    validate_strict(manifest)  # every new field is one the CRD (or the pod schema inside it) declares
    return manifest


# kubetrain's own job annotations, whatever the inputs: the PS JobSet asks the Kubernetes backend
# for the NetworkPolicy that lets only its own pods reach its servers.
_OWN_JOB_ANNOTATIONS = {"JobSet": {NETWORK_POLICY_ANNOTATION: "job-pods-only"}}

REQUESTS = {
    "pytorchjob": PyTorchRequest(**IDS, workers=2, priority_class="high"),
    "mpijob": ChainerMNRequest(**IDS, priority_class="high"),
    "jobset": PSRequest(**IDS, priority_class="high"),
    "trainjob-torch": PyTorchRequest(**IDS, job_api="trainjob"),
    "trainjob-mpi": ChainerMNRequest(**IDS, job_api="trainjob"),
}


@pytest.mark.parametrize("api", sorted(REQUESTS))
def test_labels_annotations_and_affinity_reach_the_job_and_every_pod(api: str) -> None:
    request = REQUESTS[api]
    manifest = _manifest(type(request)(**{**vars(request), "labels": LABELS, "annotations": ANNOTATIONS}))
    meta = manifest["metadata"]
    assert LABELS.items() <= meta["labels"].items()  # Kueue reads the queue name on the job itself
    assert meta["annotations"] == {**ANNOTATIONS, **_OWN_JOB_ANNOTATIONS.get(manifest["kind"], {})}
    assert meta["labels"]["kubetrain.io/kfp-task-id"] == "task-1.train"  # kubetrain's own labels stay
    templates = pod_templates(manifest)
    assert templates
    for role, template in templates.items():
        assert LABELS.items() <= template["metadata"]["labels"].items(), role
        assert ANNOTATIONS.items() <= template["metadata"]["annotations"].items(), role
        assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false", role
        assert template["spec"]["affinity"] == AFFINITY, role


@pytest.mark.parametrize("api", ["pytorchjob", "mpijob", "jobset"])
def test_the_priority_class_reaches_every_pod_and_the_gang_schedulers_podgroup(api: str) -> None:
    manifest = _manifest(REQUESTS[api])
    for role, template in pod_templates(manifest).items():
        assert template["spec"]["priorityClassName"] == "high", role
    if api != "jobset":  # the kubeflow.org operators give it to the job's PodGroup under gang scheduling
        assert manifest["spec"]["runPolicy"]["schedulingPolicy"] == {"priorityClass": "high"}


def test_by_default_nothing_new_is_emitted() -> None:
    for request in (PyTorchRequest(**IDS, workers=1), ChainerMNRequest(**IDS), PSRequest(**IDS)):
        manifest = build_manifest(
            request.to_spec(JobPlan(name="t-0123456789ab", params=TrainingParams(), pod=request.pod_options(None)))
        )
        assert manifest["metadata"].get("annotations") == _OWN_JOB_ANNOTATIONS.get(manifest["kind"])
        assert "schedulingPolicy" not in manifest["spec"].get("runPolicy", {})
        for role, template in pod_templates(manifest).items():
            # A PS job's master and servers run above its workers (deploy/priority-classes.yaml).
            control = manifest["kind"] == "JobSet" and role in ("master", "ps")
            assert template["spec"].get("priorityClassName") == ("kubetrain-ps-control" if control else None), role
            assert "affinity" not in template["spec"]
            assert set(template["metadata"]["annotations"]) == {"sidecar.istio.io/inject"}


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"labels": {"kubetrain.io/kfp-task-id": "other"}}, r"labels\['kubetrain.io/kfp-task-id'\].*a key of your own"),
        ({"labels": {"app.kubernetes.io/managed-by": "me"}}, r"labels\['app.kubernetes.io/managed-by'\].*kubetrain sets"),
        ({"annotations": {"sidecar.istio.io/inject": "true"}}, r"annotations\['sidecar.istio.io/inject'\]"),
        # Issue 48.7: the annotations input turned AppArmor (or seccomp) off, as a patch may not.
        ({"annotations": {"container.apparmor.security.beta.kubernetes.io/pytorch": "unconfined"}},
         r"annotations\['container.apparmor.security.beta.kubernetes.io/pytorch'\].*security profile"),
        ({"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}},
         r"annotations\['seccomp.security.alpha.kubernetes.io/pod'\].*security profile"),
        ({"annotations": {"container.seccomp.security.alpha.kubernetes.io/pytorch": "unconfined"}},
         r"annotations\['container.seccomp.security.alpha.kubernetes.io/pytorch'\].*security profile"),
        ({"labels": {"container.apparmor.security.beta.kubernetes.io/pytorch": "unconfined"}},
         r"labels\['container.apparmor.security.beta.kubernetes.io/pytorch'\].*security profile"),
        ({"labels": {"team": "two words"}}, r"labels\['team'\]: got 'two words'; expected a label value"),
        ({"labels": {"-team": "a"}}, r"labels\['-team'\]: got '-team'; expected a qualified key"),
        ({"labels": {"replicas": 3}}, r"labels\['replicas'\]: got 3; expected a string value \(quote numbers"),
        ({"annotations": ["a=b"]}, r"annotations: got \['a=b'\]; expected a JSON object"),
        ({"annotations": {"big": "x" * 300_000}}, r"annotations: got '300003 bytes'; expected at most 262144 bytes"),
        ({"priority_class": "High_Priority"}, r"priority_class: got 'High_Priority'; expected the name of a PriorityClass"),
        ({"priority_class": "high", "job_api": "trainjob"}, r"a TrainJob has no place for a pod priority class.*pytorchjob"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_naming_the_input_the_value_and_the_fix(inputs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        PyTorchRequest(**IDS, **inputs)


def test_specs_refuse_what_the_requests_refuse() -> None:
    """The specs hold the rules themselves, so the presets (and `kubetrain render`) refuse the same."""
    with pytest.raises(SpecError, match=r"labels\['kubetrain.io/component'\]"):
        JobMeta(name="job", user_labels={"kubetrain.io/component": "mine"})
    key = "container.apparmor.security.beta.kubernetes.io/pytorch"
    with pytest.raises(SpecError, match=r"annotations\[.*security profile"):
        JobMeta(name="job", user_annotations={key: "unconfined"})
    with pytest.raises(SpecError, match=r"priority_class: got 'a'; expected none on a TrainJob"):
        pytorch_trainjob_spec(JobSettings(name="job", params=TrainingParams(), pod=PodOptions(priority_class="a")))


def test_one_job_takes_one_priority_class() -> None:
    from dataclasses import replace

    spec = pytorch_job_spec(
        JobSettings(name="job", params=TrainingParams(), pod=PodOptions(priority_class="a")), workers=1
    )
    assert spec.worker is not None
    with pytest.raises(SpecError, match=r"priority_class: got \{'master': 'a', 'worker': 'b'\}.*same priority class"):
        replace(spec, worker=replace(spec.worker, priority_class="b"))


def test_affinity_specs_follow_the_api_servers_rules() -> None:
    term = NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(key="gpu", operator="Gt", values=("2",)),))
    assert NodeAffinity(required=(term,)).required == (term,)
    with pytest.raises(SpecError, match="exactly one integer with operator Gt"):
        NodeAffinity(
            required=(
                NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(key="gpu", operator="Gt", values=("x",)),)),
            )
        )
    with pytest.raises(SpecError, match="no values with operator Exists"):
        NodeAffinity(
            required=(
                NodeSelectorTerm(
                    match_expressions=(NodeSelectorRequirement(key="gpu", operator="Exists", values=("x",)),)
                ),
            )
        )
    with pytest.raises(SpecError, match="an empty term matches no node"):
        NodeAffinity(required=(NodeSelectorTerm(),))
