"""Objects the Kubernetes backend creates beside a job, owned by it: a JobSet's NetworkPolicy.

A JobSet annotated `kubetrain.io/network-policy: job-pods-only` (the parameter-server JobSet,
manifests.jobset) gets the NetworkPolicy `network_policy_for` builds, with the JobSet as its owner:
the garbage collector deletes it with the job, and a retried launcher that adopts the job finds it
there (409). It is a second guard, not the enforced one: the cluster's network plugin must enforce
NetworkPolicy, and where the launcher may not create one (403: a Role older than deploy/rbac.yaml's)
or the API keeps failing, the job runs without it and the launcher says so in a warning; the
job's token (ps.common.jobtoken) guards its servers either way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import JobRef
from kubetrain.backends.kubernetes.errors import api_message
from kubetrain.backends.kubernetes.retry import REQUEST_TIMEOUT, Retrier
from kubetrain.errors import BackendError
from kubetrain.manifests.jobset import NETWORK_POLICY_ANNOTATION, NETWORK_POLICY_JOB_PODS, network_policy_for
from kubetrain.manifests.kinds import JOBSET

__all__ = ["ensure_network_policy", "wants_network_policy"]

logger = logging.getLogger(__name__)


def wants_network_policy(manifest: Mapping[str, Any]) -> bool:
    """Whether `manifest` is a JobSet that asks for its NetworkPolicy."""
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    return bool(
        manifest.get("kind") == JOBSET.kind and annotations.get(NETWORK_POLICY_ANNOTATION) == NETWORK_POLICY_JOB_PODS
    )


def ensure_network_policy(
    networking: client.NetworkingV1Api, retry: Retrier, manifest: Mapping[str, Any], job: JobRef
) -> None:
    """Create the NetworkPolicy of the JobSet `job` (created from `manifest`), owned by it; a warning if it cannot."""
    body = network_policy_for(manifest)
    body["metadata"]["namespace"] = job.namespace
    # No blockOwnerDeletion: setting it needs the JobSet's finalizers, a permission the launcher lacks.
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": JOBSET.api_version, "kind": JOBSET.kind, "name": job.name, "uid": job.uid}
    ]
    what = f"create NetworkPolicy {job.namespace}/{job.name}"
    try:
        retry.call(
            what, networking.create_namespaced_network_policy, job.namespace, body,
            field_validation="Strict", _request_timeout=REQUEST_TIMEOUT,
        )  # fmt: skip
    except ApiException as e:
        if e.status == 409:
            return  # made by an earlier launcher of this task, whose job this one adopted
        _without(what, api_message(e))
    except BackendError as e:  # the API kept failing past the retries
        _without(what, str(e))


def _without(what: str, why: str) -> None:
    logger.warning(
        "%s: %s; the job runs without it (its servers still need the job's token); grant the launcher "
        "`create` on networking.k8s.io networkpolicies (deploy/rbac.yaml)",
        what,
        why,
    )
