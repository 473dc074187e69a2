"""One pass of the reaper over a namespace's jobs.

A job names the KFP step pod it answers to (annotations the launcher sets at submission and
re-sets when a retried step adopts the job). It is deleted, by its uid, once that pod is gone,
was replaced by another of the same name, or its step container has ended (Argo keeps a
terminated step's pod, so the pod's existence says nothing). Never touched: a job that names no
step pod (`kubetrain launch` from a shell), and one that is finished or suspended, which runs
nothing and may be kept on purpose (a failed job kept for debugging, a job suspended at its
timeout).

A grace period lies between seeing the step end and the delete: a step that Argo retries at once
(its retry strategy) starts a new pod that adopts the job and re-records itself on it, and the
job is then left alone. A terminated run's job is deleted one grace period after its step ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubetrain.backends.kubernetes import KubernetesBackend, StepJob
from kubetrain.errors import BackendError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reaped:
    """A job the reaper deleted, and why."""

    job: StepJob
    why: str

    def __str__(self) -> str:
        ref = self.job.ref
        return f"deleted {ref.kind.kind} {ref.namespace}/{ref.name} (uid {ref.uid}): {self.why}"


DEFAULT_GRACE_SECONDS = 30.0


class Reaper:
    """Deletes the jobs of ended KFP steps in the backend's namespace, one :meth:`sweep` at a time."""

    def __init__(
        self,
        backend: KubernetesBackend,
        *,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.steps = backend.step_jobs()
        self.grace_seconds = grace_seconds
        self.clock = clock
        self._ended_since: dict[str, float] = {}  # job uid -> when its step was first seen ended

    def sweep(self) -> list[Reaped]:
        """Delete every unsettled job whose step pod has ended; what was deleted.

        Raises BackendError when the jobs cannot be listed; a failure about one job is logged and
        the others are still looked at (the next sweep tries that one again).
        """
        reaped: list[Reaped] = []
        ended_now: dict[str, float] = {}
        for job in self.steps.jobs():
            if job.settled:
                continue
            try:
                why = self.steps.step_pod_end(job)
                if why is None:
                    continue  # its step runs (again: a retry adopted it and re-recorded itself)
                since = ended_now[job.ref.uid or ""] = self._ended_since.get(job.ref.uid or "", self.clock())
                if self.clock() - since < self.grace_seconds:
                    continue
                self.backend.delete(job.ref)
            except BackendError as e:
                logger.warning("%s %s/%s: %s", job.ref.kind.kind, job.ref.namespace, job.ref.name, e)
                continue
            done = Reaped(job, why)
            logger.info("%s", done)
            reaped.append(done)
        # Only jobs still waiting out their grace are remembered: an adopted, settled or deleted
        # job starts afresh if its step ends again.
        self._ended_since = {uid: t for uid, t in ended_now.items() if uid not in {r.job.ref.uid for r in reaped}}
        return reaped
