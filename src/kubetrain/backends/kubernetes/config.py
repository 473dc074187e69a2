"""Where the Kubernetes backend connects, in which namespace, under which name, owned by whom.

Everything here is resolved at run time inside the launcher pod, never at compile time: the old
v2 launcher sample baked `uuid4()` and the namespace into the compiled pipeline, so a re-run hit
the cache or collided on the name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from kubetrain.errors import BackendError, InvalidInputError
from kubetrain.manifests.kinds import JOBSET, KINDS, MPIJOB, PYTORCHJOB, TRAINJOB, JobKind
from kubetrain.names import derive_job_name

SERVICE_ACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# KFP components pass dsl.PIPELINE_JOB_ID_PLACEHOLDER / PIPELINE_TASK_ID_PLACEHOLDER as arguments;
# scripts and custom images may set these variables instead.
RUN_ID_ENV = "KUBETRAIN_KFP_RUN_ID"
TASK_ID_ENV = "KUBETRAIN_KFP_TASK_ID"
# The launcher pod's identity from the downward API (metadata.name, metadata.uid).
POD_NAME_ENV = "POD_NAME"
POD_UID_ENV = "POD_UID"
# Set by KFP (2.x's Argo compiler, from the downward API) in every step's container, so in the
# launcher's process too: the pod whose end must end the job (see kubetrain.reaper).
KFP_POD_NAME_ENV = "KFP_POD_NAME"
KFP_POD_UID_ENV = "KFP_POD_UID"
POD_NAMESPACE_ENV = "POD_NAMESPACE"

# Longest job name per kind such that every name the operator derives still fits 63 characters:
# PyTorchJob and MPIJob pods/services `<job>-worker-<i>` (i up to 5 digits), the MPIJob launcher's
# batch Job `<job>-launcher` (its name is a label value); JobSet pods
# `<js>-<replicatedJob>-<jobIndex>-<podIndex>` plus the 5-character suffix the JobSet webhook
# reserves, with our longest replicated-job name ("worker") and 4-digit indexes.
JOB_NAME_MAX_LENGTH: Mapping[str, int] = {PYTORCHJOB.kind: 50, MPIJOB.kind: 50, JOBSET.kind: 40, TRAINJOB.kind: 40}


def job_name_for_task(
    kind: JobKind | str,
    prefix: str,
    *,
    run_id: str | None = None,
    task_id: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The job name for this KFP task: the same on every retry of the task, distinct across runs.

    The ids come from the arguments (the component passes KFP's run and task id placeholders),
    else from KUBETRAIN_KFP_RUN_ID / KUBETRAIN_KFP_TASK_ID. The name is a DNS-1035 label short
    enough for every name the operator derives from it.
    """
    env = os.environ if environ is None else environ
    kind_name = kind.kind if isinstance(kind, JobKind) else kind
    if kind_name not in JOB_NAME_MAX_LENGTH:
        known = ", ".join(k.kind for k in KINDS)
        raise InvalidInputError(f"kind: got {kind_name!r}; expected one of {known}")
    run = run_id or env.get(RUN_ID_ENV, "")
    task = task_id or env.get(TASK_ID_ENV, "")
    if not run or not task:
        raise InvalidInputError(
            "the KFP run and task ids are needed to name the job: pass dsl.PIPELINE_JOB_ID_PLACEHOLDER and "
            f"dsl.PIPELINE_TASK_ID_PLACEHOLDER to the component, or set {RUN_ID_ENV} and {TASK_ID_ENV}"
        )
    return derive_job_name(prefix=prefix, run_id=run, task_id=task, max_length=JOB_NAME_MAX_LENGTH[kind_name])


@dataclass(frozen=True)
class Connection:
    """A configured API client, the namespace jobs go to when the manifest names none, and the
    identity's own namespace (the pod's, or the kubeconfig context's), whatever was asked for."""

    api_client: client.ApiClient
    namespace: str
    in_cluster: bool
    home_namespace: str = "default"


def connect(
    *,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE,
) -> Connection:
    """In-cluster configuration when running in a pod (and no kubeconfig was named), else kubeconfig.

    The namespace: the argument, else the pod's service-account namespace file (in a cluster),
    else the kubeconfig context's namespace, else "default".
    """
    configuration = client.Configuration()
    in_cluster = False
    context_namespace: str | None = None
    try:
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
            in_cluster = True
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
            context_namespace = _kubeconfig_namespace(kubeconfig, context)
    except (ConfigException, OSError, TypeError, ValueError) as e:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise BackendError(
            f"no usable Kubernetes configuration: not in a pod (KUBERNETES_SERVICE_HOST unset) and {where}: {e}; "
            "run inside the cluster, or pass --kubeconfig / set KUBECONFIG"
        ) from e
    # One layer of retries only (ours, with backoff and limits): urllib3 must not retry on its own.
    configuration.retries = 0
    home = (_read_namespace_file(namespace_file) if in_cluster else None) or context_namespace or "default"
    return Connection(
        api_client=client.ApiClient(configuration),
        namespace=namespace or home,
        in_cluster=in_cluster,
        home_namespace=home,
    )


def _read_namespace_file(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    if not chosen:
        return None
    namespace = (chosen.get("context") or {}).get("namespace")
    return str(namespace) if namespace else None


@dataclass(frozen=True)
class LauncherPod:
    """The launcher pod, as the owner of the jobs it creates."""

    name: str
    uid: str
    namespace: str

    def owner_reference(self) -> dict[str, Any]:
        """The ownerReference to put on a job. `blockOwnerDeletion` stays off: it would need update
        rights on pods/finalizers, which the launcher's Role does not grant."""
        return {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid, "controller": False,
                "blockOwnerDeletion": False}  # fmt: skip


def launcher_pod_from_env(
    environ: Mapping[str, str] | None = None, namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE
) -> LauncherPod:
    """The launcher pod from the downward API (POD_NAME, POD_UID; POD_NAMESPACE or the SA file).

    With it as owner, deleting the launcher pod (a cancelled KFP run) garbage-collects the job
    even if the launcher never got to delete it.
    """
    env = os.environ if environ is None else environ
    name, uid = env.get(POD_NAME_ENV), env.get(POD_UID_ENV)
    namespace = env.get(POD_NAMESPACE_ENV) or _read_namespace_file(namespace_file)
    if not name or not uid or not namespace:
        raise InvalidInputError(
            f"an owner reference to the launcher pod needs {POD_NAME_ENV}, {POD_UID_ENV} and {POD_NAMESPACE_ENV} "
            "from the downward API (fieldRef metadata.name, metadata.uid, metadata.namespace); set them on the "
            "launcher pod or drop --owner-pod"
        )
    return LauncherPod(name=name, uid=uid, namespace=namespace)


@dataclass(frozen=True)
class StepPod:
    """The KFP step pod a launcher runs in; `namespace` None when it cannot be told (not in a pod)."""

    name: str
    uid: str
    namespace: str | None


def step_pod_from_env(
    environ: Mapping[str, str] | None = None, namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE
) -> StepPod | None:
    """The KFP step pod this launcher runs in (KFP_POD_NAME, KFP_POD_UID; its namespace from
    POD_NAMESPACE or the service account's file), or None outside a KFP step (`kubetrain launch`
    from a shell: the reaper then never touches the job)."""
    env = os.environ if environ is None else environ
    name, uid = env.get(KFP_POD_NAME_ENV, "").strip(), env.get(KFP_POD_UID_ENV, "").strip()
    if not name or not uid:
        return None
    return StepPod(name=name, uid=uid, namespace=env.get(POD_NAMESPACE_ENV) or _read_namespace_file(namespace_file))
