"""TrainJob (`trainer.kubeflow.org/v1alpha1`, Kubeflow Trainer v2.3) run locally.

The runtime the TrainJob names is resolved into the JobSet the Trainer controller would create
(`trainer_runtime.resolve`, then `localize` for this machine), and the local JobSet controller
runs it. The TrainJob's status follows the JobSet's as the Trainer copies it: `Complete` from
`Completed`, `Failed` from `Failed`, `Suspended`, and `jobsStatus` from the replicated jobs'
counts; `activeDeadlineSeconds` fails it with reason `DeadlineExceeded`. Runtimes are looked up
by kind and name among those the backend was given (by default Trainer's `torch-distributed` and
kubetrain's `kubetrain-mpi`); an unknown one fails the job at once, as the Trainer does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kubetrain.backends.local.conditions import set_jobset_condition
from kubetrain.backends.local.operators.controller import Controller, JobContext
from kubetrain.backends.local.operators.jobset import JobSetController
from kubetrain.backends.local.operators.trainer_runtime import localize, resolve
from kubetrain.backends.local.pod import LocalPod
from kubetrain.errors import ManifestError

RuntimeKey = tuple[str, str]  # (kind, name)
_CONDITION_OF = {"Completed": "Complete", "Failed": "Failed", "Suspended": "Suspended"}


def runtime_key(obj: Mapping[str, Any]) -> RuntimeKey:
    """How a runtime is looked up: its kind and name."""
    return str(obj.get("kind")), str((obj.get("metadata") or {}).get("name"))


class TrainJobController(Controller):
    """The Trainer's reconcile loop over a local JobSet."""

    def __init__(self, obj: dict[str, Any], ctx: JobContext, runtimes: Mapping[RuntimeKey, Mapping[str, Any]]) -> None:
        super().__init__(obj, ctx)
        spec = obj["spec"]
        ref = spec["runtimeRef"]
        key = (str(ref.get("kind") or "ClusterTrainingRuntime"), str(ref["name"]))
        runtime = runtimes.get(key)
        if runtime is None:
            known = ", ".join(f"{k}/{n}" for k, n in sorted(runtimes)) or "none"
            raise ManifestError(
                "spec.runtimeRef",
                f"{key[0]} {key[1]!r} is not known to the local backend (it knows {known}); "
                "pass its manifest to LocalBackend(runtimes=...)",
            )
        trainer = spec.get("trainer") or {}
        mpi = ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("mpi") or {}
        ranks = int(trainer.get("numNodes") or 1) * int(trainer.get("numProcPerNode") or mpi.get("numProcPerNode") or 1)
        jobset = localize(
            resolve(obj, runtime), workdir=ctx.pods.job_dir, total_ranks=ranks, hold_port=ctx.block.hold_port
        )
        self._inner = JobSetController(jobset, ctx)
        self._deadline = spec.get("activeDeadlineSeconds")
        self._started = time.time()
        self._deadline_failed = False
        self.status = {"conditions": [], "jobsStatus": []}

    # The JobSet is this TrainJob's only child: everything but the status is the JobSet's.
    def pods(self) -> list[LocalPod]:
        """The JobSet's pods."""
        return self._inner.pods()

    def hosts(self) -> dict[str, str]:
        """The JobSet's host names."""
        return self._inner.hosts()

    def shutdown(self, message: str) -> None:
        """Stop the JobSet's pods."""
        self._inner.shutdown(message)

    @property
    def finished(self) -> bool:
        """Complete or Failed."""
        return self._deadline_failed or self._inner.finished

    def reconcile(self, now: float) -> None:
        """Suspend/resume follows the TrainJob; a passed deadline fails it; the JobSet's status is copied."""
        self._inner.obj["spec"]["suspend"] = bool(self.obj["spec"].get("suspend", False))
        if not self.finished and self._deadline is not None and now - self._started > float(self._deadline):
            self._inner.shutdown("the TrainJob passed its activeDeadlineSeconds")
            self._deadline_failed = True
            message = f"TrainJob exceeded its activeDeadlineSeconds ({self._deadline}s)"
            set_jobset_condition(self.status, "Failed", True, "DeadlineExceeded", message, now=self.now_text(now))
            return
        self._inner.reconcile(now)
        inner = self._inner.status
        for cond in inner.get("conditions") or ():
            ctype = _CONDITION_OF.get(str(cond.get("type")))
            if ctype is not None:
                set_jobset_condition(
                    self.status, ctype, cond.get("status") == "True", str(cond.get("reason") or ""),
                    str(cond.get("message") or ""), now=str(cond.get("lastTransitionTime") or self.now_text(now)),
                )  # fmt: skip
        self.status["jobsStatus"] = [dict(item) for item in inner.get("replicatedJobsStatus") or ()]
