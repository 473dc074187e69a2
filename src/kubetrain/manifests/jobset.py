"""The parameter-server job as a JobSet `jobset.x-k8s.io/v1alpha2` (JobSet v0.12).

Three replicated jobs started in order with `dependsOn`: the master, then P parameter servers (one
single-pod Job each, so shard i has the stable host name `<js>-ps-<i>-0.<js>`), then one Indexed Job
of W workers. Master and servers carry gRPC readiness probes (grpc.health.v1), so "Ready" means
"serving" and workers never start against a server that is still loading its checkpoint.
The set succeeds when the master completes; workers may restart inside their Job's backoffLimit
without failing the set (a worker pod preempted or evicted does not count: its Job's
podFailurePolicy ignores a DisruptionTarget, and its replacement waits Pending for room), and a
failed child Job restarts the whole set up to `max_restarts`, which
the master's durable state and the servers' checkpoints turn into a resume, not a fresh start.
The master's Job is final: a failed master fails the set, and the master's own podFailurePolicy
ends a failure that would repeat at its first exit (`MASTER_POD_FAILURE_POLICY`). Beside the set,
the Kubernetes backend creates the NetworkPolicy it asks for (`network_policy_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubetrain.manifests.kinds import JOBSET, PS_CONTAINER, PS_FINAL_EXIT_CODE
from kubetrain.manifests.pod import Manifest, build_pod_template, job_metadata, workspace_env
from kubetrain.specs.common import ReplicaSpec
from kubetrain.specs.jobs import PSJobSpec

JOBSET_LABEL_PREFIX = "jobset.sigs.k8s.io"
JOB_INDEX_FIELD = f"metadata.labels['{JOBSET_LABEL_PREFIX}/job-index']"
JOBSET_NAME_LABEL = f"{JOBSET_LABEL_PREFIX}/jobset-name"
# A JobSet annotated so asks the Kubernetes backend for `network_policy_for` it, owned by the set.
NETWORK_POLICY_ANNOTATION = "kubetrain.io/network-policy"
NETWORK_POLICY_JOB_PODS = "job-pods-only"
POD_RESTART_POLICY = "OnFailure"


def master_address(*, name: str, port: int) -> str:
    """host:port of the master of JobSet `name`, as every pod of the set resolves it."""
    return f"{name}-master-0-0.{name}:{port}"


def ps_addresses(*, name: str, port: int, count: int) -> list[str]:
    """host:port of every parameter server of JobSet `name`, in shard order."""
    return [f"{name}-ps-{i}-0.{name}:{port}" for i in range(count)]


# The master's Job (its pods restartPolicy Never, which a podFailurePolicy requires): a failure
# the master knows a restart would only repeat (ps.master.main.exit_code) fails the Job at once,
# and so the set (MasterFailureIsFinal), instead of restarting it after the kubelet's back-off
# up to backoffLimit times; a pod lost to preemption, eviction or a node drain (DisruptionTarget)
# does not count against backoffLimit. Any other failure (a peer down, a full disk) counts.
MASTER_POD_FAILURE_POLICY: Manifest = {
    "rules": [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": PS_CONTAINER, "operator": "In", "values": [PS_FINAL_EXIT_CODE]},
        },
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
}


# The workers' Job (pods restartPolicy Never): a worker pod preempted, evicted or drained away
# (DisruptionTarget) does not count against its limit; its tasks go back on the queue (the master
# hears of it from its pod watch) and the Job's replacement pod waits Pending for room. The limit
# is per index (backoffLimitPerIndex, maxFailedIndexes 0: one worker failing past it fails the
# Job, as backoffLimit would): the Job controller delays a replacement by 10 s doubling per
# failure, ignored ones included (kubernetes#119434), counted over the whole Job unless the limit
# is per index. Eight workers preempted at once then waited 10 min (10 s x 2^7, capped) for their
# replacements, whatever room there was; per index, each waits 10 s.
WORKER_POD_FAILURE_POLICY: Manifest = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
}

# What the master's pod tells it about itself through the downward API, for its watch on the set's
# worker pods (kubetrain.elastic.master).
MASTER_ENV: tuple[Manifest, ...] = (
    {
        "name": "KUBETRAIN_JOBSET_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET_NAME_LABEL}']"}},
    },
    {"name": "KUBETRAIN_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
)


# A worker's pod UID goes into its incarnation (ps.common.procs.incarnation_default): the master
# refuses every process of a pod its watch saw preempted, while the replacement (same host name,
# another UID) is welcome.
WORKER_ENV: tuple[Manifest, ...] = (
    {"name": "KUBETRAIN_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
)


def _grpc_probe(port: int) -> Manifest:
    return {"grpc": {"port": port}, "periodSeconds": 2, "failureThreshold": 3, "timeoutSeconds": 2}


def _replicated_job(
    spec: PSJobSpec,
    *,
    name: str,
    replica: ReplicaSpec,
    job_replicas: int,
    pods_per_job: int,
    backoff_limit: int,
    port: int | None,
    depends_on: str | None,
    pod_restart_policy: str = POD_RESTART_POLICY,
    pod_failure_policy: Manifest | None = None,
    role_env: tuple[Manifest, ...] = (),
    limit_per_index: bool = False,
) -> Manifest:
    env: list[Manifest] = [
        *role_env,
        {"name": "KUBETRAIN_PS_MODE", "value": spec.mode},
        {"name": "KUBETRAIN_PS_MASTER", "value": master_address(name=spec.meta.name, port=spec.master_port)},
        {
            "name": "KUBETRAIN_PS_ADDRS",
            "value": ",".join(ps_addresses(name=spec.meta.name, port=spec.ps_port, count=spec.ps.replicas)),
        },
        {"name": "KUBETRAIN_PS_STATE_DIR", "value": spec.state_dir},
        {"name": "KUBETRAIN_PS_CHECKPOINT_DIR", "value": spec.checkpoint_dir},
        # The shard a server owns is its Job's index within the replicated job.
        {"name": "KUBETRAIN_PS_INDEX", "valueFrom": {"fieldRef": {"fieldPath": JOB_INDEX_FIELD}}},
        # Servers listen on the pod's own address rather than on every interface: the same on a
        # cluster, and on the local backend (one loopback address per pod, one network) two
        # servers on the same port would otherwise collide.
        {"name": "KUBETRAIN_BIND_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        *workspace_env(spec.workspace),
    ]
    template = build_pod_template(
        meta=spec.meta,
        replica=replica,
        container_name=PS_CONTAINER,
        role_labels={"kubetrain.io/replica-type": name},
        extra_env=env,
        ports=[{"name": "grpc", "containerPort": port, "protocol": "TCP"}] if port else [],
        pod_restart_policy=replica.restart_policy or pod_restart_policy,
        readiness_probe=_grpc_probe(port) if port else None,
        workspace=spec.workspace,
    )
    job_spec: Manifest = {
        "parallelism": pods_per_job,
        "completions": pods_per_job,
        "completionMode": "Indexed",
        "template": template,
    }
    if limit_per_index:
        job_spec.update({"backoffLimitPerIndex": backoff_limit, "maxFailedIndexes": 0})
    else:
        job_spec["backoffLimit"] = backoff_limit
    if pod_failure_policy is not None and template["spec"].get("restartPolicy") == "Never":
        job_spec["podFailurePolicy"] = pod_failure_policy
    if spec.run_policy.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.run_policy.active_deadline_seconds
    out: Manifest = {"name": name, "replicas": job_replicas, "template": {"spec": job_spec}}
    if depends_on is not None:
        out["dependsOn"] = [{"name": depends_on, "status": "Ready"}]
    return out


def build_ps_jobset(spec: PSJobSpec) -> Manifest:
    """The JobSet for `spec` (master → ps → worker, success when the master completes)."""
    server_backoff = spec.run_policy.backoff_limit if spec.run_policy.backoff_limit is not None else 3
    replicated = [
        _replicated_job(
            spec,
            name="master",
            replica=spec.master,
            job_replicas=1,
            pods_per_job=1,
            backoff_limit=server_backoff,
            port=spec.master_port,
            depends_on=None,
            pod_restart_policy="Never",
            pod_failure_policy=MASTER_POD_FAILURE_POLICY,
            role_env=MASTER_ENV,
        ),
        _replicated_job(
            spec,
            name="ps",
            replica=spec.ps,
            job_replicas=spec.ps.replicas,
            pods_per_job=1,
            backoff_limit=server_backoff,
            port=spec.ps_port,
            depends_on="master",
        ),
        _replicated_job(
            spec,
            name="worker",
            replica=spec.worker,
            job_replicas=1,
            pods_per_job=spec.worker.replicas,
            backoff_limit=spec.worker_backoff_limit,
            port=None,
            depends_on="ps",
            pod_restart_policy="Never",
            pod_failure_policy=WORKER_POD_FAILURE_POLICY,
            role_env=WORKER_ENV,
            limit_per_index=True,
        ),
    ]
    # The master's state is on the claim: a recreated set would resume its recorded failure (a
    # diverged model, dropped work) and fail again, so a failed master Job fails the set at once.
    # Workers exit 0 once the job has ended (ps.common.errors.JobEndedError), so theirs do not.
    rules: list[Manifest] = [
        {"name": "MasterFailureIsFinal", "action": "FailJobSet", "targetReplicatedJobs": ["master"]}
    ]
    if spec.run_policy.active_deadline_seconds is not None:
        # A deadline is final: restarting the set would only run into it again.
        rules.append({"name": "DeadlineIsFinal", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]})
    job_spec: Manifest = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": ["master"]},
        "failurePolicy": {"maxRestarts": spec.max_restarts, "restartStrategy": "Recreate", "rules": rules},
        "replicatedJobs": replicated,
    }
    if spec.run_policy.suspend:
        job_spec["suspend"] = True
    if spec.run_policy.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.run_policy.ttl_seconds_after_finished
    metadata = job_metadata(spec.meta)
    metadata.setdefault("annotations", {})[NETWORK_POLICY_ANNOTATION] = NETWORK_POLICY_JOB_PODS
    return {"apiVersion": JOBSET.api_version, "kind": JOBSET.kind, "metadata": metadata, "spec": job_spec}


def network_policy_for(jobset: Mapping[str, Any]) -> Manifest:
    """A `networking.k8s.io/v1` NetworkPolicy admitting only the JobSet's own pods to its pods.

    Same name, namespace and labels as the JobSet. Ingress only, on every port: the master's and
    the servers' gRPC ports are what it guards; egress (the API server, DNS, the data) stays open.
    It takes effect only where the cluster's network plugin enforces NetworkPolicy (Calico,
    Cilium, ...; not the plain bridge plugin), and never stops the kubelet's probes: traffic from a
    pod's own node is always allowed. Where it is not enforced, the job's token is the guard
    (ps.common.jobtoken).
    """
    meta = jobset.get("metadata") or {}
    name = str(meta.get("name") or "")

    def own_pods() -> Manifest:
        return {"matchLabels": {JOBSET_NAME_LABEL: name}}

    metadata: Manifest = {"name": name}
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    if meta.get("labels"):
        metadata["labels"] = dict(meta["labels"])
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": own_pods(),
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": own_pods()}]}],
        },
    }


def build_ps_network_policy(spec: PSJobSpec) -> Manifest:
    """The NetworkPolicy the Kubernetes backend creates beside `build_ps_jobset(spec)`."""
    return network_policy_for(build_ps_jobset(spec))
