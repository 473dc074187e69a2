"""The events about one job the launcher reads while it waits: the job object's, and Warnings
about a few of its pending pods (ImagePullBackOff, FailedScheduling, a rejected MPIJob)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import EventInfo, JobRef
from kubetrain.backends.kubernetes.errors import api_error
from kubetrain.backends.kubernetes.objects import belongs_to, event_info
from kubetrain.backends.kubernetes.retry import REQUEST_TIMEOUT, Retrier
from kubetrain.manifests.kinds import JOBSET, TRAINJOB

__all__ = ["EVENT_PODS", "list_job_events"]

# How many of a job's pending pods the launcher asks about at each look at the events.
EVENT_PODS = 3
# The kinds whose pods are created by child Jobs (a TrainJob's through its JobSet).
CHILD_JOB_KINDS = (JOBSET, TRAINJOB)


def list_job_events(
    core: client.CoreV1Api, retry: Retrier, ref: JobRef, *, pods: Sequence[str] = ()
) -> list[EventInfo]:
    """Events about the job object and Warnings about the named pods (a few), oldest first.

    One field-selected listing each: the API server filters a namespace's events for every
    listing, so a namespace-wide `type=Warning` listing by each of a thousand launchers grows
    with the square of the jobs (seen at N=1000 against the real API server). The pods of one
    job that are pending usually wait for the same reason, so the first few tell it.
    """
    what = f"list events of {ref.kind.kind} {ref.namespace}/{ref.name}"
    selectors = [f"involvedObject.name={ref.name}"]
    selectors += [f"involvedObject.name={pod},type=Warning" for pod in list(pods)[:EVENT_PODS]]
    if ref.kind in CHILD_JOB_KINDS:
        # A JobSet's pods are created by its child Jobs, whose controller says only in an event on
        # the Job why a pod was refused (a full quota, a missing PriorityClass). Their names are
        # `<set>-<replicated job>-<index>`, which no field selector matches by prefix: the
        # namespace's refused creations are listed (few, and only while something is pending).
        selectors.append("involvedObject.kind=Job,type=Warning,reason=FailedCreate")
    raw: list[Mapping[str, Any]] = []
    for selector in selectors:
        try:
            response = retry.call(
                what, core.list_namespaced_event, ref.namespace, field_selector=selector,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        except ApiException as e:
            raise api_error(what, e) from e
        raw.extend(json.loads(response.data).get("items") or [])
    seen: set[str] = set()
    out: list[EventInfo] = []
    for item in raw:
        uid = str((item.get("metadata") or {}).get("uid") or id(item))
        info = event_info(item)
        if uid in seen or not belongs_to(ref, info):
            continue
        seen.add(uid)
        out.append(info)
    return sorted(out, key=lambda e: e.last_timestamp.timestamp() if e.last_timestamp else 0.0)
