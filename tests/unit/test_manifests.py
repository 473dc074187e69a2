"""Rendered manifests follow the operator contracts and validate strictly against the upstream CRDs."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, TypedDict

import pytest

from kubetrain.errors import ManifestError
from kubetrain.manifests import build_manifest, build_ps_network_policy
from kubetrain.manifests.kinds import PS_FINAL_EXIT_CODE
from kubetrain.manifests.validate import validate_manifest
from kubetrain.names import LABEL_RUN_ID, LABEL_TASK_ID
from kubetrain.presets import JobSettings, TrainingParams, mpi_job_spec, ps_job_spec, pytorch_job_spec
from kubetrain.specs import JobSpec, RunPolicy
from tests.crd_schema import strict_errors, validate_strict


class KfpIds(TypedDict):
    """The presets' KFP run and task, for `**IDS`."""

    kfp_run_id: str
    kfp_task_id: str


PARAMS = TrainingParams()
IDS: KfpIds = {"kfp_run_id": "0f4e-run", "kfp_task_id": "task-7"}


def _matrix() -> list[tuple[str, JobSpec]]:
    return [
        ("pytorch-master-only", pytorch_job_spec(JobSettings(name="pt-solo", params=PARAMS, **IDS))),
        ("pytorch-master-3-workers", pytorch_job_spec(JobSettings(name="pt-ddp", params=PARAMS, **IDS), workers=3)),
        ("pytorch-elastic-1-4", pytorch_job_spec(JobSettings(name="pt-elastic", params=PARAMS, **IDS),
                                                 workers=2, elastic=(1, 4))),
        ("pytorch-nccl-deadline", pytorch_job_spec(JobSettings(
            name="pt-gpu", params=PARAMS, workspace_pvc="ws",
            run_policy=RunPolicy(active_deadline_seconds=600, ttl_seconds_after_finished=60, backoff_limit=2), **IDS),
            workers=1, backend="nccl")),
        ("mpi-1-launcher-2-workers", mpi_job_spec(JobSettings(name="mpi", params=PARAMS, **IDS), workers=2)),
        ("mpi-4-workers-2-slots", mpi_job_spec(JobSettings(name="mpi-wide", params=PARAMS, workspace_pvc="ws", **IDS),
                                               workers=4, slots_per_worker=2)),
        ("ps-1-2-3", ps_job_spec(JobSettings(name="ps", params=PARAMS, workspace_pvc="ws", **IDS),
                                 ps_replicas=2, workers=3)),
        ("ps-sync-deadline", ps_job_spec(JobSettings(name="ps-sync", params=PARAMS,
                                                     run_policy=RunPolicy(active_deadline_seconds=900), **IDS),
                                         ps_replicas=1, workers=2, mode="sync")),
    ]  # fmt: skip


@pytest.mark.parametrize(("label", "spec"), _matrix(), ids=[m[0] for m in _matrix()])
def test_rendered_manifest_is_strictly_valid(label: str, spec: JobSpec) -> None:
    manifest = build_manifest(spec)
    assert strict_errors(manifest) == [], label
    validate_manifest(manifest)


def _pods(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest["spec"]
    if manifest["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"] for rj in spec["replicatedJobs"]]
    key = "pytorchReplicaSpecs" if manifest["kind"] == "PyTorchJob" else "mpiReplicaSpecs"
    return [r["template"] for r in spec[key].values()]


@pytest.mark.parametrize(("label", "spec"), _matrix(), ids=[m[0] for m in _matrix()])
def test_every_pod_is_restricted_labelled_and_istio_free(label: str, spec: JobSpec) -> None:
    for pod in _pods(build_manifest(spec)):
        labels = pod["metadata"]["labels"]
        assert labels[LABEL_RUN_ID] == "0f4e-run"
        assert labels[LABEL_TASK_ID] == "task-7"
        assert labels["sidecar.istio.io/inject"] == "false"
        assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        pod_sc = pod["spec"]["securityContext"]
        assert pod_sc["runAsNonRoot"] is True
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["spec"]["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}


def test_pytorch_contract_container_master_and_run_policy_placement() -> None:
    manifest = build_manifest(pytorch_job_spec(JobSettings(name="pt", params=PARAMS), workers=3))
    spec = manifest["spec"]
    assert set(spec) == {"runPolicy", "nprocPerNode", "pytorchReplicaSpecs"}
    assert spec["runPolicy"]["backoffLimit"] == 3
    master = spec["pytorchReplicaSpecs"]["Master"]
    assert master["replicas"] == 1  # explicit: the webhook rejects a nil Master replica count
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    for rspec in spec["pytorchReplicaSpecs"].values():
        container = rspec["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"
        assert {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"} in container["ports"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/dev/shm"] == "dshm"
        shm = next(v for v in rspec["template"]["spec"]["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"


def test_pytorch_master_only_has_no_worker_key() -> None:
    spec = build_manifest(pytorch_job_spec(JobSettings(name="pt", params=PARAMS)))["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Master"]


def test_elastic_pytorch_runs_torchrun_on_workers_only() -> None:
    spec = build_manifest(pytorch_job_spec(JobSettings(name="pt", params=PARAMS), workers=2, elastic=(1, 4)))["spec"]
    assert spec["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4, "rdzvBackend": "c10d", "maxRestarts": 3}
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"]
    command = spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "torch.distributed.run"]


def test_elastic_pytorch_torchrun_can_take_a_preempted_pods_replacement_back_in() -> None:
    # The replacement has the same host name (torchrun PID 1 again), and a rank 0 that stays rank 0
    # does not publish its shared store in the next round: either way both pods' containers failed.
    def worker_env(elastic: tuple[int, int] | None) -> Any:
        job = build_manifest(pytorch_job_spec(JobSettings(name="pt", params=PARAMS), workers=2, elastic=elastic))
        return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]

    address = {"name": "PET_LOCAL_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    own_store = {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}
    assert address in worker_env((1, 4)) and own_store in worker_env((1, 4))
    assert address not in worker_env(None) and own_store not in worker_env(None)  # plain DDP runs no torchrun


def test_mpi_workers_run_non_root_sshd_and_are_cleaned_up() -> None:
    spec = build_manifest(mpi_job_spec(JobSettings(name="m", params=PARAMS), workers=2))["spec"]
    assert spec["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    assert spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "OnFailure"
    assert spec["mpiReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["command"][:2] == ["/usr/sbin/sshd", "-De"]
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 2222
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][:3] == ["mpirun", "-n", "2"]


def test_ps_jobset_order_probes_and_success_policy() -> None:
    spec = build_manifest(ps_job_spec(JobSettings(name="ps", params=PARAMS), ps_replicas=2, workers=3))["spec"]
    names = [rj["name"] for rj in spec["replicatedJobs"]]
    assert names == ["master", "ps", "worker"]
    assert "dependsOn" not in spec["replicatedJobs"][0]
    assert spec["replicatedJobs"][1]["dependsOn"] == [{"name": "master", "status": "Ready"}]
    assert spec["replicatedJobs"][2]["dependsOn"] == [{"name": "ps", "status": "Ready"}]
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["master"]}
    assert spec["replicatedJobs"][1]["replicas"] == 2
    workers = spec["replicatedJobs"][2]["template"]["spec"]
    assert (workers["parallelism"], workers["completions"], workers["completionMode"]) == (3, 3, "Indexed")
    # Worker restarts do not fail the set; the limit is each worker's (index's), so that the Job
    # controller delays each replacement by that index's failures, not by all of them together
    # (8 workers preempted at once waited 10 min under a Job-wide backoffLimit).
    assert "backoffLimit" not in workers
    assert (workers["backoffLimitPerIndex"], workers["maxFailedIndexes"]) == (6, 0)
    for rj in spec["replicatedJobs"][:2]:
        container = rj["template"]["spec"]["template"]["spec"]["containers"][0]
        assert "grpc" in container["readinessProbe"]
    env = {e["name"]: e.get("value") for e in workers["template"]["spec"]["containers"][0]["env"]}
    assert env["KUBETRAIN_PS_ADDRS"] == "ps-ps-0-0.ps:50052,ps-ps-1-0.ps:50052"
    assert env["KUBETRAIN_PS_MASTER"] == "ps-master-0-0.ps:50051"


def test_ps_master_job_fails_at_once_on_a_final_exit_and_not_on_a_disruption() -> None:
    manifest = build_manifest(ps_job_spec(JobSettings(name="ps", params=PARAMS), ps_replicas=2, workers=3))
    master, *others = (rj["template"]["spec"] for rj in manifest["spec"]["replicatedJobs"])
    assert master["template"]["spec"]["restartPolicy"] == "Never"  # a podFailurePolicy needs it
    assert master["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onExitCodes": {"containerName": "ps", "operator": "In", "values": [PS_FINAL_EXIT_CODE]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    assert master["template"]["spec"]["containers"][0]["name"] == "ps"
    servers, workers = others
    assert "podFailurePolicy" not in servers
    # A worker preempted or evicted does not use up its Job's retries; any other failure does.
    assert workers["template"]["spec"]["restartPolicy"] == "Never"
    assert workers["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    assert strict_errors(manifest) == []  # JobSet v0.12's CRD embeds batch/v1's JobSpec
    validate_manifest(manifest)


def test_ps_master_restart_policy_set_by_the_user_is_kept_without_a_pod_failure_policy() -> None:
    spec = ps_job_spec(JobSettings(name="ps", params=PARAMS))
    spec = dataclasses.replace(spec, master=dataclasses.replace(spec.master, restart_policy="OnFailure"))
    master = build_manifest(spec)["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert master["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert "podFailurePolicy" not in master


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda job: job["template"]["spec"].__setitem__("restartPolicy", "OnFailure"), "restartPolicy Never"),
        (lambda job: job["podFailurePolicy"]["rules"][0]["onExitCodes"].__setitem__("containerName", "main"),
         r"'main' is not a container of the pod \(ps\)"),
        (lambda job: job["podFailurePolicy"]["rules"][0]["onExitCodes"].__setitem__("values", [0, 10]), "0 is not a failure"),
    ],
)  # fmt: skip
def test_a_pod_failure_policy_the_api_server_would_refuse_is_refused(mutate: Any, match: str) -> None:
    manifest = copy.deepcopy(build_manifest(ps_job_spec(JobSettings(name="ps", params=PARAMS))))
    mutate(manifest["spec"]["replicatedJobs"][0]["template"]["spec"])
    with pytest.raises(ManifestError, match=r"replicatedJobs\[master\]\.template\.spec\.podFailurePolicy.*" + match):
        validate_manifest(manifest)


def test_the_ps_network_policy_admits_only_the_jobs_own_pods() -> None:
    spec = ps_job_spec(JobSettings(name="ps", params=PARAMS, namespace="team-a"), ps_replicas=2, workers=3)
    jobset, policy = build_manifest(spec), build_ps_network_policy(spec)
    assert strict_errors(policy) == []  # against the API server's own OpenAPI schema
    # Same name, namespace and run/task labels; the JobSet asks the Kubernetes backend for it.
    assert policy["metadata"] == {k: jobset["metadata"][k] for k in ("name", "namespace", "labels")}
    assert jobset["metadata"]["annotations"]["kubetrain.io/network-policy"] == "job-pods-only"
    own = {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "ps"}}  # JobSet labels every pod of the set so
    assert policy["spec"] == {
        "podSelector": own,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": own}]}],
    }
    policy["spec"]["ingress"][0]["form"] = policy["spec"]["ingress"][0].pop("from")  # what a typo would do
    assert strict_errors(policy) == [
        "spec.ingress.0: Additional properties are not allowed ('form' was unexpected) (the API server would drop or "
        "reject it)"
    ]


# --- the validators refuse what the API server or the operators would refuse ----------------------


def _pt_manifest() -> dict[str, Any]:
    return copy.deepcopy(build_manifest(pytorch_job_spec(JobSettings(name="pt", params=PARAMS), workers=2)))


def test_schema_catches_run_policy_at_spec_top_level() -> None:
    manifest = _pt_manifest()
    manifest["spec"]["cleanPodPolicy"] = "All"
    assert any("cleanPodPolicy" in e for e in strict_errors(manifest))
    with pytest.raises(ManifestError, match=r"must be under spec\.runPolicy"):
        validate_manifest(manifest)


def test_schema_catches_misspelled_container_field() -> None:
    manifest = _pt_manifest()
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "x"
    errors = strict_errors(manifest)
    assert errors and "imagePullPolcy" in errors[0]
    with pytest.raises(ValueError, match="imagePullPolcy"):
        validate_strict(manifest)


def test_schema_catches_wrong_types() -> None:
    manifest = _pt_manifest()
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    assert any("replicas" in e for e in strict_errors(manifest))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda m: m["spec"]["pytorchReplicaSpecs"].__setitem__("master", m["spec"]["pytorchReplicaSpecs"].pop("Master")),
         "exactly Master and Worker"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].pop("replicas"), "replicas: 1 explicitly"),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"].__setitem__("replicas", 0), "must be ≥ 1"),
        (lambda m: [r["template"]["spec"]["containers"][0].__setitem__("name", "main")
                    for r in m["spec"]["pytorchReplicaSpecs"].values()], "named 'pytorch'"),
        (lambda m: m["metadata"].__setitem__("name", "Upper"), "DNS-1035"),
        (lambda m: m.__setitem__("apiVersion", "kubeflow.org/v2"), "not supported"),
    ],
)  # fmt: skip
def test_pytorch_webhook_rules(mutate: Any, match: str) -> None:
    manifest = _pt_manifest()
    mutate(manifest)
    with pytest.raises(ManifestError, match=match):
        validate_manifest(manifest)


def test_mpi_controller_rules() -> None:
    manifest = copy.deepcopy(build_manifest(mpi_job_spec(JobSettings(name="m", params=PARAMS))))
    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    with pytest.raises(ManifestError, match="only Never or OnFailure"):
        validate_manifest(manifest)
    manifest = copy.deepcopy(build_manifest(mpi_job_spec(JobSettings(name="m", params=PARAMS))))
    del manifest["spec"]["mpiReplicaSpecs"]["Launcher"]
    with pytest.raises(ManifestError, match="Launcher: is required"):
        validate_manifest(manifest)


def test_jobset_rules() -> None:
    base = build_manifest(ps_job_spec(JobSettings(name="ps", params=PARAMS)))
    manifest = copy.deepcopy(base)
    manifest["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    with pytest.raises(ManifestError, match="mutually exclusive"):
        validate_manifest(manifest)
    manifest = copy.deepcopy(base)
    manifest["spec"]["successPolicy"]["targetReplicatedJobs"] = ["chief"]
    with pytest.raises(ManifestError, match="'chief' is not a replicated job"):
        validate_manifest(manifest)
    manifest = copy.deepcopy(base)
    manifest["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "worker", "status": "Ready"}]
    with pytest.raises(ManifestError, match="not an earlier replicated job"):
        validate_manifest(manifest)


@pytest.mark.parametrize(
    ("rules", "match"),
    [
        ([{"name": "deadline-is-final", "action": "FailJobSet"}], r"rules\[0\]\.name.*no '-'"),
        ([{"name": "1st", "action": "FailJobSet"}], r"rules\[0\]\.name.*a letter first"),
        ([{"name": "a" * 129, "action": "FailJobSet"}], r"rules\[0\]\.name.*1-128 characters"),
        ([{"name": "Final", "action": "FailJobSet"}, {"name": "Final", "action": "RestartJobSet"}],
         r"rules\[1\]\.name.*names two rules"),
    ],
)  # fmt: skip
def test_jobset_failure_rule_names_follow_the_webhook(rules: list[dict[str, str]], match: str) -> None:
    # The JobSet webhook refuses these with HTTP 422; the schema alone lets them through.
    manifest = build_manifest(ps_job_spec(JobSettings(name="ps", params=PARAMS)))
    manifest["spec"]["failurePolicy"]["rules"] = rules
    assert strict_errors(manifest) == []
    with pytest.raises(ManifestError, match=match):
        validate_manifest(manifest)


def test_user_manifest_of_unknown_kind_is_refused() -> None:
    with pytest.raises(ManifestError, match="TFJob"):
        validate_manifest({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "x"}, "spec": {}})
