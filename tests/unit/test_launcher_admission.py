"""The launcher's verdict on a refused pod: wait (the quota is full now) or fail at once (it never fits).

The messages are the API server's own, as its admission plugins format them (resourcequota,
priority, serviceaccount, podsecurity, limitranger) and as the Job controller and the
training-operator wrap them in their FailedCreate / FailedCreatePod events.
"""

from __future__ import annotations

import pytest

from kubetrain.launcher.admission import refusal

WRAP = 'Error creating: pods "ps-x-worker-0-0-abcde" is forbidden: '


def test_a_pod_larger_than_the_whole_quota_fails_at_once_naming_quota_request_and_room() -> None:
    verdict = refusal(
        "FailedCreate",
        WRAP + "exceeded quota: kf-resource-quota, requested: requests.cpu=4, used: requests.cpu=1, "
        "limited: requests.cpu=2",
        namespace="alice",
    )
    assert verdict is not None and verdict.final
    assert verdict.line.startswith(
        "pods refused by ResourceQuota kf-resource-quota in alice: requested requests.cpu=4, used 1 of 2."
    )


def test_a_pod_that_fits_once_others_finish_waits_and_says_so() -> None:
    verdict = refusal(
        "FailedCreatePod",
        WRAP + "exceeded quota: kf-resource-quota, requested: cpu=1500m,memory=1Gi, used: cpu=1,memory=1Gi, "
        "limited: cpu=2,memory=4Gi",
        namespace="alice",
    )
    assert verdict is not None and not verdict.final
    assert verdict.line.startswith(
        "waiting for ResourceQuota kf-resource-quota in alice: requested cpu=1500m, used 1 of 2; memory=1Gi, used 1Gi of 4Gi"
    )


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (WRAP + "failed quota: kf-resource-quota: must specify limits.cpu for: ps; limits.memory for: ps",
         "pods refused by ResourceQuota kf-resource-quota in alice: it needs every pod to set limits.cpu for: ps"),
        (WRAP + "no PriorityClass with name kubetrain-ps-control was found",
         "pods refused: PriorityClass kubetrain-ps-control does not exist in this cluster"),
        (WRAP + 'error looking up service account alice/kubetrain-ps-master: serviceaccount "kubetrain-ps-master" not found',
         "pods refused: service account kubetrain-ps-master does not exist in alice"),
        (WRAP + 'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false',
         "pods refused by alice's Pod Security level restricted:latest: allowPrivilegeEscalation != false"),
        (WRAP + "maximum cpu usage per Container is 2, but limit is 4",
         "pods refused by a LimitRange in alice: maximum cpu usage per Container is 2, but limit is 4"),
    ],
)  # fmt: skip
def test_refusals_no_wait_can_change_fail_at_once(message: str, expected: str) -> None:
    verdict = refusal("FailedCreate", message, namespace="alice")
    assert verdict is not None and verdict.final
    assert verdict.line.startswith(expected)


def test_other_events_are_not_refusals() -> None:
    assert refusal("FailedScheduling", "0/1 nodes are available: 1 Insufficient cpu.", namespace="a") is None
    assert (
        refusal("FailedCreate", "Error creating: Internal error occurred: etcdserver: request timed out", namespace="a")
        is None
    )
    assert refusal("ValidationError", WRAP + "no PriorityClass with name x was found", namespace="a") is None
