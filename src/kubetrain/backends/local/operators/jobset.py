"""JobSet (`jobset.x-k8s.io/v1alpha2`, JobSet v0.12) run locally as its controller runs it.

- Each replicated job `rj` with `replicas: R` becomes R child Jobs `<js>-<rj>-<j>` (batch Jobs,
  Indexed: see `batchjob`), whose pods get host name `<js>-<rj>-<j>-<p>` in subdomain
  `network.subdomain` (default `<js>`), env `JOB_COMPLETION_INDEX=<p>`, and the labels and
  annotations JobSet and the Job controller set (jobset-name, replicatedjob-name, job-index,
  job-global-index, restart-attempt, group-*, job-key, coordinator, job-completion-index, ...),
  so downward-API `fieldRef`s such as `metadata.labels['jobset.sigs.k8s.io/job-index']` resolve.
- Start-up order: `dependsOn` (a replicated job is created once each dependency is Ready — all its
  Jobs ready, succeeded or failed — or Complete), or `startupPolicy: InOrder` (each one after the
  previous one's Jobs are all ready; conditions StartupPolicyInProgress/StartupPolicyCompleted).
  A pod is ready when its readiness probe passes (see `..probe`); without a probe, once started.
- Success: `successPolicy` (All/Any over `targetReplicatedJobs`, default all) → Completed
  (AllJobsCompleted); the remaining Jobs are stopped.
- Failure: a failed child Job (its own backoffLimit or activeDeadlineSeconds) with no
  failurePolicy fails the set (FailedJobs); otherwise the first matching rule's action applies
  (FailJobSet, RestartJobSet (the default), RestartJobSetAndIgnoreMaxRestarts, RestartJob,
  RestartJobAndIgnoreMaxRestarts); restarts beyond `maxRestarts` fail it (ReachedMaxRestarts).
  A restart recreates every Job (every restartStrategy behaves as Recreate locally) and
  increments `status.restarts`.
- `suspend`: every Job's pods stop, condition Suspended; resuming recreates the Jobs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from kubetrain.backends.local.conditions import condition_is_true, set_jobset_condition
from kubetrain.backends.local.env import env_items
from kubetrain.backends.local.operators.batchjob import BatchJob
from kubetrain.backends.local.operators.controller import Controller, JobContext, random_suffix
from kubetrain.backends.local.pod import LocalPod
from kubetrain.backends.local.podspec import PodPlan, main_container

KIND = "JobSet"
P = "jobset.sigs.k8s.io"
_RESTART_ACTIONS = (
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
)


@dataclass(frozen=True)
class _RJob:
    name: str
    group: str
    replicas: int
    job_spec: dict[str, Any]
    depends_on: tuple[tuple[str, str], ...]
    pods_per_job: int
    first_global_index: int


class JobSetController(Controller):
    """The JobSet controller over local batch Jobs."""

    def __init__(self, obj: dict[str, Any], ctx: JobContext) -> None:
        super().__init__(obj, ctx)
        spec = obj["spec"]
        network = spec.get("network") or {}
        self._subdomain = str(network.get("subdomain") or self.name)
        self._in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        self._rjobs: list[_RJob] = []
        global_index = 0
        for raw in spec["replicatedJobs"]:
            job_spec = raw["template"]["spec"]
            parallelism = int(job_spec.get("parallelism", 1))
            rj = _RJob(
                name=str(raw["name"]),
                group=str(raw.get("groupName") or "default"),
                replicas=int(raw.get("replicas", 1)),
                job_spec=job_spec,
                depends_on=tuple((str(d["name"]), str(d["status"])) for d in raw.get("dependsOn") or []),
                pods_per_job=int(job_spec.get("completions") or parallelism),
                first_global_index=global_index,
            )
            self._rjobs.append(rj)
            global_index += rj.replicas
        self._global_replicas = global_index
        self._addresses: dict[tuple[str, int, int], str] = {}
        for rj in self._rjobs:
            for j in range(rj.replicas):
                for p in range(rj.pods_per_job):
                    self._addresses[(rj.name, j, p)] = ctx.block.address(len(self._addresses))
        self._jobs: dict[tuple[str, int], BatchJob] = {}
        self._created: set[str] = set()  # replicated jobs whose Jobs exist in this attempt
        self._job_attempts: dict[tuple[str, int], int] = {}
        self.status = {"restarts": 0, "restartsCountTowardsMax": 0, "replicatedJobsStatus": self._rjob_statuses()}

    # --- identity ------------------------------------------------------------------------------
    def _hostname(self, rj: str, j: int, p: int) -> str:
        return f"{self.name}-{rj}-{j}-{p}"

    def hosts(self) -> dict[str, str]:
        """Every pod's host name and `<host>.<subdomain>` → its address."""
        out = {}
        for (rj, j, p), address in self._addresses.items():
            out[self._hostname(rj, j, p)] = address
            out[f"{self._hostname(rj, j, p)}.{self._subdomain}"] = address
        return out

    def _labels(self, rj: _RJob, j: int) -> dict[str, str]:
        job_name = f"{self.name}-{rj.name}-{j}"
        group = [r for r in self._rjobs if r.group == rj.group]
        group_index = sum(r.replicas for r in group[: group.index(rj)]) + j
        labels = {
            f"{P}/jobset-name": self.name,
            f"{P}/jobset-uid": self.ctx.uid,
            f"{P}/replicatedjob-name": rj.name,
            f"{P}/replicatedjob-replicas": str(rj.replicas),
            f"{P}/global-replicas": str(self._global_replicas),
            f"{P}/job-index": str(j),
            f"{P}/job-global-index": str(rj.first_global_index + j),
            f"{P}/group-name": rj.group,
            f"{P}/group-replicas": str(sum(r.replicas for r in group)),
            f"{P}/job-group-index": str(group_index),
            f"{P}/restart-attempt": str(self.status.get("restarts", 0)),
            f"{P}/job-key": hashlib.sha1(f"{self.ctx.namespace}/{job_name}".encode()).hexdigest(),
        }
        coordinator = (self.obj["spec"].get("coordinator")) or {}
        if coordinator:
            host = self._hostname(
                str(coordinator["replicatedJob"]),
                int(coordinator.get("jobIndex", 0)),
                int(coordinator.get("podIndex", 0)),
            )
            labels[f"{P}/coordinator"] = f"{host}.{self._subdomain}"
        return labels

    def _make_pod_factory(self, rj: _RJob, j: int) -> Any:
        job_name = f"{self.name}-{rj.name}-{j}"
        jobset_labels = self._labels(rj, j)
        job_uid = f"{self.ctx.uid}-{rj.name}-{j}-{random_suffix()}"
        template = rj.job_spec["template"]
        container = main_container(template, None)

        def make(p: int) -> LocalPod:
            meta = template.get("metadata") or {}
            batch = {
                "batch.kubernetes.io/job-completion-index": str(p),
                "batch.kubernetes.io/job-name": job_name,
                "job-name": job_name,
                "batch.kubernetes.io/controller-uid": job_uid,
                "controller-uid": job_uid,
            }
            annotations = {
                **(meta.get("annotations") or {}),
                **jobset_labels,
                "batch.kubernetes.io/job-completion-index": str(p),
            }
            name = f"{job_name}-{p}-{random_suffix()}"
            plan = PodPlan(
                name=name,
                hostname=self._hostname(rj.name, j, p),
                replica_type=rj.name,
                index=j * rj.pods_per_job + p,
                address=self._addresses[(rj.name, j, p)],
                prefix=f"{rj.name}-{j}-{p}",
                uid=f"{job_uid}-{p}-{random_suffix()}",
                template=template,
                labels={**(meta.get("labels") or {}), **jobset_labels, **batch},
                annotations=annotations,
                container_name=str(container.get("name")),
                image=str(container.get("image") or ""),
                operator_env=tuple(env_items([("JOB_COMPLETION_INDEX", str(p))])),
            )
            return LocalPod(plan, self.ctx.pods)

        return make

    # --- views -------------------------------------------------------------------------------
    def pods(self) -> list[LocalPod]:
        """Pods of the current attempt, in replicated-job order."""
        return [pod for key in sorted(self._jobs, key=self._job_order) for pod in self._jobs[key].all_pods()]

    def _job_order(self, key: tuple[str, int]) -> tuple[int, int]:
        return next(i for i, rj in enumerate(self._rjobs) if rj.name == key[0]), key[1]

    def shutdown(self, message: str) -> None:
        """Stop every Job."""
        for job in self._jobs.values():
            job.stop(phase="Failed", reason="Deleted", message=message)

    def _rjob_statuses(self) -> list[dict[str, Any]]:
        out = []
        suspended = self.is_suspended()
        for rj in self._rjobs:
            jobs = [job for (name, _), job in self._jobs.items() if name == rj.name]
            done = [job for job in jobs if job.outcome is not None]
            out.append(
                {
                    "name": rj.name,
                    "ready": sum(1 for job in jobs if job.outcome is None and job.is_ready),
                    "succeeded": sum(1 for job in done if job.outcome is not None and job.outcome.type == "Complete"),
                    "failed": sum(1 for job in done if job.outcome is not None and job.outcome.type == "Failed"),
                    "active": sum(1 for job in jobs if job.outcome is None and job.active > 0),
                    "suspended": rj.replicas if suspended else 0,
                }
            )
        return out

    def _reached(self, name: str, wanted: str, statuses: dict[str, dict[str, Any]]) -> bool:
        rj = next(r for r in self._rjobs if r.name == name)
        st = statuses[name]
        if wanted == "Complete":
            return bool(st["succeeded"] == rj.replicas)
        return bool(st["ready"] + st["succeeded"] + st["failed"] >= rj.replicas)

    # --- reconcile -------------------------------------------------------------------------------
    def reconcile(self, now: float) -> None:
        """One pass of the JobSet controller."""
        if self._finished:
            return
        text = self.now_text(now)
        if self.is_suspended():
            self.shutdown("the JobSet is suspended")
            self._jobs.clear()
            self._created.clear()
            if set_jobset_condition(self.status, "Suspended", True, "SuspendedJobs", "jobset is suspended", now=text):
                self.event("Normal", "SuspendedJobs", "jobset is suspended")
            self.status["replicatedJobsStatus"] = self._rjob_statuses()
            return
        if condition_is_true(self.status, "Suspended"):
            set_jobset_condition(self.status, "Suspended", False, "ResumeJobs", "jobset is resumed", now=text)
            self.event("Normal", "ResumeJobs", "jobset is resumed")
        for job in list(self._jobs.values()):
            job.step(now)
        statuses = {s["name"]: s for s in self._rjob_statuses()}
        failed = [
            (key, job) for key, job in self._jobs.items() if job.outcome is not None and job.outcome.type == "Failed"
        ]
        if failed:
            self._on_failures(failed, text)
            if self._finished:
                return
            statuses = {s["name"]: s for s in self._rjob_statuses()}
        if self._succeeded(statuses):
            self._finish("Completed", "AllJobsCompleted", "jobset completed successfully", text)
            return
        self._create_jobs(statuses, now)
        self.status["replicatedJobsStatus"] = self._rjob_statuses()
        if self._in_order:
            self._startup_conditions(text)

    def _create_jobs(self, statuses: dict[str, dict[str, Any]], now: float) -> None:
        for k, rj in enumerate(self._rjobs):
            if rj.name not in self._created:
                if self._in_order and k > 0 and not self._reached(self._rjobs[k - 1].name, "Ready", statuses):
                    return  # InOrder: nothing after a replicated job that is not ready yet
                if not all(self._reached(dep, status, statuses) for dep, status in rj.depends_on):
                    continue
                self._created.add(rj.name)
            for j in range(rj.replicas):
                if (rj.name, j) not in self._jobs:
                    job = BatchJob(
                        name=f"{self.name}-{rj.name}-{j}",
                        spec=rj.job_spec,
                        make_pod=self._make_pod_factory(rj, j),
                        restart_backoff_seconds=self.ctx.restart_backoff_seconds,
                    )
                    self._jobs[(rj.name, j)] = job
                    job.step(now)

    def _succeeded(self, statuses: dict[str, dict[str, Any]]) -> bool:
        policy = self.obj["spec"].get("successPolicy") or {}
        targets = policy.get("targetReplicatedJobs") or [rj.name for rj in self._rjobs]
        if str(policy.get("operator") or "All") == "Any":
            return any(statuses[t]["succeeded"] > 0 for t in targets)
        replicas = {rj.name: rj.replicas for rj in self._rjobs}
        return all(statuses[t]["succeeded"] == replicas[t] for t in targets)

    def _on_failures(self, failed: list[tuple[tuple[str, int], BatchJob]], text: str) -> None:
        failed.sort(key=lambda item: item[1].outcome.time if item[1].outcome else 0.0)
        first_key, first = failed[0]
        fatal = next((job for _, job in failed if job.fatal is not None), None)
        if fatal is not None:
            self._finish("Failed", "FailedJobs", str(fatal.fatal), text)
            return
        policy = self.obj["spec"].get("failurePolicy")
        if policy is None:
            self._finish(
                "Failed", "FailedJobs", self._with_job("jobset failed due to one or more job failures", first), text
            )
            return
        action, key, job = "RestartJobSet", first_key, first
        for rule in policy.get("rules") or []:
            match = next(((k, jb) for k, jb in failed if self._rule_applies(rule, k, jb)), None)
            if match is not None:
                action, (key, job) = str(rule["action"]), match
                break
        if action == "FailJobSet":
            self._finish(
                "Failed",
                "FailJobSetFailurePolicyAction",
                self._with_job("applying FailJobSet failure policy action", job),
                text,
            )
            return
        counts = action in ("RestartJobSet", "RestartJob")
        if counts and int(self.status.get("restartsCountTowardsMax", 0)) >= int(policy.get("maxRestarts") or 0):
            self._finish(
                "Failed",
                "ReachedMaxRestarts",
                self._with_job("jobset failed due to reaching max number of restarts", job),
                text,
            )
            return
        self.event(
            "Warning", f"{action}FailurePolicyAction", self._with_job(f"applying {action} failure policy action", job)
        )
        if counts:
            self.status["restartsCountTowardsMax"] = int(self.status.get("restartsCountTowardsMax", 0)) + 1
        if action.startswith("RestartJobSet"):
            self.status["restarts"] = int(self.status.get("restarts", 0)) + 1
            self.shutdown("the JobSet restarts")
            self._jobs.clear()
            self._created.clear()
        else:
            self._job_attempts[key] = self._job_attempts.get(key, 0) + 1
            self._jobs.pop(key).stop(phase="Failed", reason="Restarting", message="the Job is recreated")

    @staticmethod
    def _rule_applies(rule: dict[str, Any], key: tuple[str, int], job: BatchJob) -> bool:
        outcome = job.outcome
        if outcome is None:
            return False
        reasons = rule.get("onJobFailureReasons") or []
        patterns = rule.get("onJobFailureMessagePatterns") or []
        targets = rule.get("targetReplicatedJobs") or []
        return (
            (not reasons or outcome.reason in reasons)
            and (not patterns or any(re.search(p, outcome.message) for p in patterns))
            and (not targets or key[0] in targets)
        )

    @staticmethod
    def _with_job(message: str, job: BatchJob) -> str:
        detail = f"; {job.outcome.reason}: {job.outcome.message}" if job.outcome else ""
        return f"{message} (first failed job: {job.name}){detail}"

    def _finish(self, ctype: str, reason: str, message: str, text: str) -> None:
        phase = "Succeeded" if ctype == "Completed" else "Failed"
        for job in self._jobs.values():
            job.stop(phase=phase, reason=reason, message=f"stopped: the JobSet {ctype.lower()}")
        set_jobset_condition(self.status, ctype, True, reason, message, now=text)
        if condition_is_true(self.status, "StartupPolicyInProgress"):
            set_jobset_condition(self.status, "StartupPolicyInProgress", False, reason, message, now=text)
        self.status["terminalState"] = ctype
        self.status["replicatedJobsStatus"] = self._rjob_statuses()
        self.event("Normal" if ctype == "Completed" else "Warning", reason, message)
        self._finished = True

    def _startup_conditions(self, text: str) -> None:
        statuses = {s["name"]: s for s in self.status["replicatedJobsStatus"]}
        if all(rj.name in self._created and self._reached(rj.name, "Ready", statuses) for rj in self._rjobs):
            done = ("InOrderStartupPolicyCompleted", "in order startup policy has completed")
            set_jobset_condition(self.status, "StartupPolicyInProgress", False, *done, now=text)
            set_jobset_condition(self.status, "StartupPolicyCompleted", True, *done, now=text)
        elif not condition_is_true(self.status, "StartupPolicyCompleted"):
            progress = ("InOrderStartupPolicyInProgress", "in order startup policy is in progress")
            set_jobset_condition(self.status, "StartupPolicyInProgress", True, *progress, now=text)
