"""The log tails a failed job's error carries: one per pod that failed or crashed while watched.

A pod still there is read now; a pod its controller deleted meanwhile (a Job past its
backoffLimit) gives the tail the pod tracker read when it crashed, with a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubetrain.backends.base import Backend, JobRef, PodInfo
from kubetrain.launcher.logs import read_tail
from kubetrain.launcher.pods import PodBook, crash_summary

__all__ = ["FailureTails", "collect_failure_tails"]


@dataclass
class FailureTails:
    """`tails` keyed `pod/container`; `notes` for pods gone by now; `tailed` as (pod, tail) pairs."""

    tails: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    tailed: list[tuple[PodInfo, str]] = field(default_factory=list)


def collect_failure_tails(
    backend: Backend, ref: JobRef, pods: list[PodInfo], book: PodBook, *, lines: int
) -> FailureTails:
    """The last `lines` log lines of every pod `book` saw fail or crash; `pods` are those still there."""
    found = FailureTails()
    here = {pod.name for pod in pods}
    for pod in book.failed():
        key = f"{pod.name}/{pod.container}"
        if pod.name in here:
            found.tails[key] = read_tail(backend, ref, pod, lines)
            found.tailed.append((pod, found.tails[key]))
            continue
        # Its controller deleted it (a Job past its backoffLimit): the tail read at its crash.
        kept = book.tails.get(pod.name)
        found.tails[key] = kept.text if kept is not None else "<not read: the pod was deleted before it could be>"
        seen = kept.pod if kept is not None else pod
        found.notes[key] = f" (pod deleted since; read when it crashed: {crash_summary(seen)})"
        found.tailed.append((seen, found.tails[key]))
    return found
