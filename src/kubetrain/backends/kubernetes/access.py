"""Whether this launcher may create its job in another namespace, asked before anything is submitted.

A job normally goes to the launcher's own namespace (its pod's, or the kubeconfig context's). When
the `namespace` input names another one, the API server's RBAC decides, and in a multi-user
Kubeflow it says no: a profile's `default-editor` is bound in its own namespace only. A
SelfSubjectAccessReview (which every authenticated identity may create, through the built-in
`system:basic-user` role) gets that answer first, so the step fails with one line that says why
and what to do, and no object was created anywhere.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.kubernetes.retry import Retrier
from kubetrain.errors import InvalidInputError
from kubetrain.manifests.kinds import JobKind


def require_create_access(api: client.ApiClient, retry: Retrier, kind: JobKind, namespace: str, own: str) -> None:
    """Refuse (InvalidInputError, exit 2) a job in `namespace` that this identity may not create.

    Asked only when `namespace` is not `own`, the launcher's own namespace (its pod's, or its
    kubeconfig context's; not the `namespace` input), where deploy/rbac.yaml is the contract. If the
    review itself cannot be made, the create goes ahead and the API server's own answer is the error.
    """
    if namespace == own:
        return
    attributes = client.V1ResourceAttributes(namespace=namespace, verb="create", group=kind.group, resource=kind.plural)
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes))
    try:
        answer = retry.call("review access", client.AuthorizationV1Api(api).create_self_subject_access_review, review)
    except ApiException:
        return
    status = answer.status
    if status is None or status.allowed:
        return
    why = f" ({status.reason})" if status.reason else ""
    raise InvalidInputError(
        f"namespace: {namespace!r}: this launcher's service account may not create {kind.plural}.{kind.group} "
        f"there{why}; nothing was submitted. A step creates its job in its own namespace ({own!r}): leave "
        "`namespace` empty, or have an admin bind deploy/rbac.yaml's Role to this service account in "
        f"{namespace!r} (in a multi-user Kubeflow, a profile's steps may use only their own profile's namespace)"
    )
