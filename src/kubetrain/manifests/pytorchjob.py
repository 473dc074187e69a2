"""PyTorchJob `kubeflow.org/v1` manifests (training-operator v1.9)."""

from __future__ import annotations

from kubetrain.manifests.kinds import PYTORCH_CONTAINER, PYTORCHJOB
from kubetrain.manifests.pod import Manifest, build_pod_template, job_metadata, run_policy_to_k8s, workspace_env
from kubetrain.specs.common import ReplicaSpec
from kubetrain.specs.jobs import PyTorchJobSpec, common_priority_class

# The port name the training-operator looks up to set MASTER_PORT (operator-contracts.md §2).
PYTORCH_PORT_NAME = "pytorchjob-port"
# The operator's own default; written explicitly so `kubectl get -o yaml` shows what runs.
DEFAULT_RESTART_POLICY = "OnFailure"
# What an elastic job's torchrun needs to take a preempted pod's replacement back in (both seen on
# the real node, torch 2.13: without them the two sides waited on each other until the store's
# 60 s timeout failed both containers, restarts that count against backoffLimit):
# - its node's name in the c10d rendezvous is its address (`--local-addr`), PID and a local id;
#   the default address is the host name, which the replacement shares (and torchrun is PID 1 in
#   both): the rendezvous took the new pod for the member that left. The pod's IP is its own.
# - with the TCP store shared between the agents and the workers (torch's default), a rank 0 that
#   stays rank 0 in the next round does not publish that store's address in it, and a joining
#   agent waits for it; the opt-out makes every round's rank 0 publish its own.
ELASTIC_ENV: tuple[Manifest, ...] = (
    {"name": "PET_LOCAL_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
)


def _pod_restart_policy(replica_policy: str) -> str:
    # The operator overwrites the pod's policy from the replica's (ExitCode becomes Never) and warns
    # in an event when they differ; writing the same value avoids that warning.
    return "Never" if replica_policy == "ExitCode" else replica_policy


def _replica(spec: PyTorchJobSpec, replica: ReplicaSpec, rtype: str) -> Manifest:
    policy = replica.restart_policy or DEFAULT_RESTART_POLICY
    env: list[Manifest] = [{"name": "KUBETRAIN_DIST_BACKEND", "value": spec.backend}]
    env.extend(workspace_env(spec.workspace))
    if spec.elastic is not None:
        env.extend(ELASTIC_ENV)
    template = build_pod_template(
        meta=spec.meta,
        replica=replica,
        container_name=PYTORCH_CONTAINER,
        role_labels={"kubetrain.io/replica-type": rtype.lower()},
        extra_env=env,
        ports=[{"name": PYTORCH_PORT_NAME, "containerPort": spec.master_port, "protocol": "TCP"}],
        pod_restart_policy=_pod_restart_policy(policy),
        workspace=spec.workspace,
        shm_size=spec.shm_size,
    )
    return {"replicas": replica.replicas, "restartPolicy": policy, "template": template}


def build_pytorchjob(spec: PyTorchJobSpec) -> Manifest:
    """The PyTorchJob for `spec`: Master (replicas: 1, always explicit) and/or Worker replicas.

    Run policy goes under `spec.runPolicy`; every old launcher wrote it at the top of `spec`,
    where the API server pruned it silently.
    """
    replica_specs: Manifest = {}
    if spec.master is not None:
        replica_specs["Master"] = _replica(spec, spec.master, "Master")
    if spec.worker is not None:
        replica_specs["Worker"] = _replica(spec, spec.worker, "Worker")
    rp = spec.run_policy
    job_spec: Manifest = {
        "runPolicy": run_policy_to_k8s(
            backoff_limit=rp.backoff_limit,
            active_deadline_seconds=rp.active_deadline_seconds,
            ttl=rp.ttl_seconds_after_finished,
            clean_pod_policy=rp.clean_pod_policy or "None",
            suspend=rp.suspend,
            priority_class=common_priority_class({"master": spec.master, "worker": spec.worker}),
        ),
        "nprocPerNode": spec.nproc_per_node,
        "pytorchReplicaSpecs": replica_specs,
    }
    if spec.elastic is not None:
        elastic: Manifest = {
            "minReplicas": spec.elastic.min_replicas,
            "maxReplicas": spec.elastic.max_replicas,
            "rdzvBackend": spec.elastic.rdzv_backend,
        }
        if spec.elastic.max_restarts is not None:
            elastic["maxRestarts"] = spec.elastic.max_restarts
        if spec.elastic.rdzv_port is not None:
            elastic["rdzvPort"] = spec.elastic.rdzv_port
        if spec.elastic.rdzv_host is not None:
            elastic["rdzvHost"] = spec.elastic.rdzv_host
        job_spec["elasticPolicy"] = elastic
    return {
        "apiVersion": PYTORCHJOB.api_version,
        "kind": PYTORCHJOB.kind,
        "metadata": job_metadata(spec.meta),
        "spec": job_spec,
    }
