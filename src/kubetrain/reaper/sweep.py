"""One pass of the reaper over a namespace's jobs.

A job names the KFP step pod it answers to (annotations the launcher sets at submission and
re-sets when a retried step adopts the job). It is deleted, by its uid, once that pod is gone,
was replaced by another of the same name, or its step container has ended (Argo keeps a
terminated step's pod, so the pod's existence says nothing). Never touched: a job that names no
step pod (`kubetrain launch` from a shell), and one that is finished or suspended, which runs
nothing and may be kept on purpose (a failed job kept for debugging, a job suspended at its
timeout).
"""

from __future__ import annotations

import logging
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


class Reaper:
    """Deletes the jobs of ended KFP steps in the backend's namespace, one :meth:`sweep` at a time."""

    def __init__(self, backend: KubernetesBackend) -> None:
        self.backend = backend
        self.steps = backend.step_jobs()

    def sweep(self) -> list[Reaped]:
        """Delete every unsettled job whose step pod has ended; what was deleted.

        Raises BackendError when the jobs cannot be listed; a failure about one job is logged and
        the others are still looked at (the next sweep tries that one again).
        """
        reaped: list[Reaped] = []
        for job in self.steps.jobs():
            if job.settled:
                continue
            try:
                why = self.steps.step_pod_end(job)
                if why is None:
                    continue
                self.backend.delete(job.ref)
            except BackendError as e:
                logger.warning("%s %s/%s: %s", job.ref.kind.kind, job.ref.namespace, job.ref.name, e)
                continue
            done = Reaped(job, why)
            logger.info("%s", done)
            reaped.append(done)
        return reaped
