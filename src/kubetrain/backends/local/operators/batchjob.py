"""A batch/v1 Job run locally: the MPIJob launcher and every child Job of a JobSet.

Semantics of the Job controller that matter here:
- `completionMode: Indexed`: one pod per index 0..completions-1, at most `parallelism` at once,
  each with env `JOB_COMPLETION_INDEX`; the Job is Complete when every index has succeeded.
- pod `restartPolicy: OnFailure`: the kubelet restarts the container in place (emptyDirs kept);
  `Never`: a failed pod stays failed and the Job creates a new pod for its index. Either way every
  failure counts, and the Job fails with `BackoffLimitExceeded` once failures exceed `backoffLimit`
  (default 6).
- `podFailurePolicy` (pods `restartPolicy: Never`): the first rule whose `onExitCodes` matches a
  failed pod's exit code acts: `FailJob` fails the Job at once (`PodFailurePolicy`), `Ignore`
  replaces the pod without counting the failure, `Count` counts it. `onPodConditions` rules never
  match here: nothing preempts or evicts a local pod (no `DisruptionTarget`).
- `backoffLimitPerIndex` (with `maxFailedIndexes`): failures count per index instead; an index
  failing more than its limit is failed and not recreated; past `maxFailedIndexes` failed indexes
  the Job fails at once (`MaxFailedIndexesExceeded`), otherwise it ends Failed (`FailedIndexes`)
  once every other index has succeeded. `backoffLimit` then defaults to unlimited.
- `activeDeadlineSeconds`, from the Job's start: Failed with `DeadlineExceeded`.
- restarts wait an exponential back-off (the kubelet's 10 s, 20 s, ... scaled down locally);
  under `backoffLimitPerIndex` a replacement's delay follows its own index's failures, the
  ignored ones included, as the Job controller's does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubetrain.backends.local.operators.controller import backoff_delay, get_int
from kubetrain.backends.local.pod import LocalPod

DEFAULT_BACKOFF_LIMIT = 6
UNLIMITED = 2**31 - 1  # the API server's default backoffLimit when backoffLimitPerIndex is set


@dataclass(frozen=True)
class JobOutcome:
    """The terminal condition of a Job."""

    type: str  # Complete or Failed
    reason: str
    message: str
    time: float


class BatchJob:
    """One Job's pods and policies."""

    def __init__(
        self,
        *,
        name: str,
        spec: Mapping[str, Any],
        make_pod: Callable[[int], LocalPod],
        restart_backoff_seconds: float,
    ) -> None:
        self.name = name
        self.parallelism = get_int(spec, "parallelism", 1) or 0
        self.completions = get_int(spec, "completions", None) or self.parallelism
        self.limit_per_index = get_int(spec, "backoffLimitPerIndex", None)
        self.max_failed_indexes = get_int(spec, "maxFailedIndexes", None)
        default_limit = DEFAULT_BACKOFF_LIMIT if self.limit_per_index is None else UNLIMITED
        self.backoff_limit = get_int(spec, "backoffLimit", default_limit) or 0
        self.deadline = get_int(spec, "activeDeadlineSeconds", None)
        template_spec = (spec.get("template") or {}).get("spec") or {}
        self.pod_restart_policy = str(template_spec.get("restartPolicy") or "OnFailure")
        self._failure_rules: list[Mapping[str, Any]] = list((spec.get("podFailurePolicy") or {}).get("rules") or [])
        self._make_pod = make_pod
        self._backoff = restart_backoff_seconds
        self.pods: dict[int, LocalPod] = {}
        self.replaced: list[LocalPod] = []  # failed pods of restartPolicy Never, kept for their logs
        self.succeeded: set[int] = set()
        self.failures = 0
        self.index_failures: dict[int, int] = {}  # counted, per index (backoffLimitPerIndex)
        self._index_disruptions: dict[int, int] = {}  # counted or not: what a replacement's delay follows
        self.failed_indexes: set[int] = set()
        self.start_time: float | None = None
        self.outcome: JobOutcome | None = None
        self.fatal: str | None = None
        self._create_after: dict[int, float] = {}

    # --- counts as the Job status reports them ----------------------------------------------
    @property
    def active(self) -> int:
        """Pods running or waiting for an in-place restart."""
        return sum(1 for p in self.pods.values() if p.running or p.restart_at is not None)

    @property
    def ready(self) -> int:
        """Pods passing their readiness probe."""
        return sum(1 for p in self.pods.values() if p.ready)

    @property
    def failed_pods(self) -> int:
        """Pods in phase Failed."""
        return len(self.replaced) + sum(1 for p in self.pods.values() if p.phase == "Failed" and p.restart_at is None)

    @property
    def is_ready(self) -> bool:
        """JobSet's notion of a ready Job: ready + succeeded pods reach its parallelism."""
        return self.ready + len(self.succeeded) >= max(min(self.parallelism, self.completions), 1)

    def all_pods(self) -> list[LocalPod]:
        """Every pod of this Job, replaced ones first."""
        return [*self.replaced, *(self.pods[i] for i in sorted(self.pods))]

    # --- reconcile ---------------------------------------------------------------------------
    def step(self, now: float) -> None:
        """Observe pods, restart or replace failed ones, create missing ones, decide the outcome."""
        if self.outcome is not None:
            return
        if self.start_time is None:
            self.start_time = now
        if self.deadline is not None and now - self.start_time >= self.deadline:
            self._finish("Failed", "DeadlineExceeded", "Job was active longer than specified deadline", now)
            return
        for index, pod in list(self.pods.items()):
            if pod.restart_at is not None and now >= pod.restart_at:
                pod.restart_in_place()
            if self._check_fatal(pod, now):
                return
            code = pod.poll()
            if code is None:
                continue
            if code == 0:
                self.succeeded.add(index)
                continue
            action, rule = self._failure_action(pod, code)
            if action == "FailJob":
                container = pod.info().container
                message = (
                    f"Container {container} for pod {pod.plan.name} failed with exit code {code} "
                    f"matching FailJob rule at index {rule}"
                )
                self._finish("Failed", "PodFailurePolicy", message, now)
                return
            if action != "Ignore":
                self.failures += 1
                self.index_failures[index] = self.index_failures.get(index, 0) + 1
            self._index_disruptions[index] = self._index_disruptions.get(index, 0) + 1
            if self.failures > self.backoff_limit:
                detail = f"{pod.plan.name} exited with code {code}"
                self._finish(
                    "Failed", "BackoffLimitExceeded", f"Job has reached the specified backoff limit; {detail}", now
                )
                return
            if self.limit_per_index is not None and self.index_failures.get(index, 0) > self.limit_per_index:
                self.failed_indexes.add(index)
                self.replaced.append(self.pods.pop(index))
                if self.max_failed_indexes is not None and len(self.failed_indexes) > self.max_failed_indexes:
                    message = "Job has exceeded the specified maximal number of failed indexes"
                    self._finish("Failed", "MaxFailedIndexesExceeded", message, now)
                    return
                continue
            per_index = self.limit_per_index is not None
            delay = backoff_delay(self._backoff, self._index_disruptions[index] if per_index else max(self.failures, 1))
            if self.pod_restart_policy == "OnFailure":
                pod.restart_at = now + delay
                pod.reason, pod.message = "CrashLoopBackOff", f"exit code {code}; restarting in {delay:.1f}s"
            else:
                self.replaced.append(self.pods.pop(index))
                self._create_after[index] = now + delay
        if len(self.succeeded) >= self.completions:
            self._finish("Complete", "CompletionsReached", "Reached expected number of succeeded pods", now)
            return
        if self.failed_indexes and len(self.succeeded | self.failed_indexes) >= self.completions:
            self._finish("Failed", "FailedIndexes", "Job has failed indexes", now)
            return
        active = self.active
        for index in range(self.completions):
            if active >= self.parallelism:
                break
            if index in self.succeeded or index in self.failed_indexes or index in self.pods:
                continue
            if self._create_after.get(index, 0.0) > now:
                continue
            pod = self._make_pod(index)
            self.pods[index] = pod
            pod.start()
            if self._check_fatal(pod, now):
                return
            active += 1

    def _failure_action(self, pod: LocalPod, code: int) -> tuple[str, int]:
        """The podFailurePolicy's verdict on a failed pod: (FailJob, Ignore or Count; the rule's index)."""
        if self.pod_restart_policy != "Never":  # the API server allows a podFailurePolicy only then
            return "Count", -1
        container = pod.info().container
        for i, rule in enumerate(self._failure_rules):
            codes = rule.get("onExitCodes")
            if codes is None or codes.get("containerName") not in (None, container):
                continue
            listed = code in [int(v) for v in codes.get("values") or ()]
            if listed == (codes.get("operator") == "In"):
                return str(rule.get("action")), i
        return "Count", -1

    def _check_fatal(self, pod: LocalPod, now: float) -> bool:
        if pod.fatal is None:
            return False
        self.fatal = pod.fatal
        self._finish("Failed", "PodFailed", pod.fatal, now)
        return True

    def _finish(self, ctype: str, reason: str, message: str, now: float) -> None:
        self.outcome = JobOutcome(ctype, reason, message, now)
        phase = "Succeeded" if ctype == "Complete" else "Failed"
        for pod in self.pods.values():
            if pod.running or pod.restart_at is not None:
                pod.stop(phase=phase, reason=reason, message=message)

    def stop(self, *, phase: str, reason: str, message: str) -> None:
        """Stop every running pod (Job deleted, suspended or its JobSet finished)."""
        for pod in self.pods.values():
            if pod.running or pod.restart_at is not None:
                pod.stop(phase=phase, reason=reason, message=message)
