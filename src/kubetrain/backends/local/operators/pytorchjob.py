"""PyTorchJob (`kubeflow.org/v1`) run locally as training-operator v1.9 runs it.

- One pod per replica (`<job>-master-0`, `<job>-worker-<i>`), all started at once, each with the
  env the operator appends to every container (operator-contracts.md §2): PYTHONUNBUFFERED,
  MASTER_ADDR/PORT, WORLD_SIZE, RANK, PET_* (elastic: PET_RDZV_*, PET_NNODES=min:max, ...).
  MASTER_ADDR names the master's service, which the backend rewrites to its loopback address.
  The master's port and an in-job elastic rendezvous port are the job's own (`rendezvous_ports`):
  MASTER_PORT, PET_MASTER_PORT and PET_RDZV_ENDPOINT carry them instead of the manifest's.
- Success: the master succeeded (the workers are then stopped); without a master, every worker
  succeeded, or any worker under an elasticPolicy.
- A failed replica under restartPolicy OnFailure/Always, or ExitCode with a code ≥ 128, restarts
  (condition Restarting); Never, or ExitCode 1–127, fails the job. Always restarts even after
  exit 0, as the kubelet does. Restarts count against `runPolicy.backoffLimit` the way
  `PastBackoffLimit` counts them (limit 0: the first restart fails the job; limit N: the N-th).
- `activeDeadlineSeconds` from `status.startTime`: Failed with reason DeadlineExceeded (the operator
  writes reason PyTorchJobFailed and the same message; the local backend uses the reason the
  batch Job controller and mpi-operator use, so deadline failures read the same for every kind).
- Suspend: every pod stops, Running=False and Suspended=True; resume resets `startTime`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubetrain.backends.local.conditions import condition_is_true, rfc3339, set_kubeflow_condition
from kubetrain.backends.local.env import env_items
from kubetrain.backends.local.operators.controller import Controller, JobContext, backoff_delay, get_int
from kubetrain.backends.local.pod import LocalPod
from kubetrain.backends.local.podspec import PodPlan, main_container

KIND = "PyTorchJob"
CONTAINER = "pytorch"
PORT_NAME = "pytorchjob-port"
DEFAULT_PORT = 23456
TYPES = ("Master", "Worker")


def _replica_port(spec: dict[str, Any], rtype: str) -> int:
    replica = (spec.get("pytorchReplicaSpecs") or {}).get(rtype) or {}
    container = main_container(replica["template"], CONTAINER)
    for port in container.get("ports") or []:
        if port.get("name") == PORT_NAME:
            return int(port["containerPort"])
    return DEFAULT_PORT  # the operator's defaulting appends this port when it is missing


def pytorch_operator_env(
    job: dict[str, Any], rtype: str, index: int, *, ports: Mapping[int, int] | None = None
) -> list[dict[str, str]]:
    """The env training-operator v1.9 appends to every container of replica `rtype`-`index`.

    `ports` (manifest port → port): the ports the programs are told instead of the manifest's
    (the local backend gives each job rendezvous ports of its own, see `rendezvous_ports`).
    """
    own = ports or {}
    name = str(job["metadata"]["name"])
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    nproc = str(spec.get("nprocPerNode") or "auto")
    per_node = int(nproc) if nproc.isdigit() else 1
    pairs: list[tuple[str, str]] = [("PYTHONUNBUFFERED", "1")]
    if "Master" in replicas:
        manifest_port = _replica_port(spec, "Master")
        port = str(own.get(manifest_port, manifest_port))
        master = f"{name}-master-0"
        rank = str(index + 1 if rtype == "Worker" else index)
        pairs += [("MASTER_PORT", port), ("MASTER_ADDR", master), ("PET_MASTER_PORT", port)]
        pairs += [("PET_MASTER_ADDR", master), ("WORLD_SIZE", str(total * per_node))]
        pairs += [("RANK", rank), ("PET_NODE_RANK", rank)]
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        workers = int((replicas.get("Worker") or {}).get("replicas", 1))
        low = elastic.get("minReplicas", elastic.get("maxReplicas", workers))
        high = elastic.get("maxReplicas", low)
        host = elastic.get("rdzvHost") or f"{name}-worker-0"
        rdzv_port = int(elastic.get("rdzvPort") or _replica_port(spec, "Worker"))
        rdzv_port = own.get(rdzv_port, rdzv_port) if _in_job(job, str(host)) else rdzv_port
        pairs += [
            ("PET_RDZV_ENDPOINT", f"{host}:{rdzv_port}"),
            ("PET_RDZV_BACKEND", elastic.get("rdzvBackend") or "c10d"),
        ]
        pairs.append(("PET_NNODES", f"{low}:{high}"))
        if elastic.get("maxRestarts") is not None:
            pairs.append(("PET_MAX_RESTARTS", str(elastic["maxRestarts"])))
        if elastic.get("nProcPerNode") is not None:
            pairs.append(("PET_NPROC_PER_NODE", str(elastic["nProcPerNode"])))
        if elastic.get("rdzvId") is not None:
            pairs.append(("PET_RDZV_ID", str(elastic["rdzvId"])))
        if elastic.get("rdzvConf"):
            pairs.append(("PET_RDZV_CONF", ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])))
        if elastic.get("standalone"):
            pairs.append(("PET_STANDALONE", ""))
    else:
        pairs.append(("PET_NNODES", str(total)))
    if elastic is None or elastic.get("nProcPerNode") is None:
        pairs.append(("PET_NPROC_PER_NODE", nproc))
    return env_items(pairs)


def _in_job(job: dict[str, Any], host: str) -> bool:
    """Whether `host` (as a manifest writes it, with or without a domain) names one of the job's pods."""
    name = job["metadata"]["name"]
    pods = {
        f"{name}-{rtype.lower()}-{i}"
        for rtype, replica in job["spec"]["pytorchReplicaSpecs"].items()
        for i in range(int(replica.get("replicas", 1)))
    }
    return host.split(".", maxsplit=1)[0] in pods


def rendezvous_ports(job: dict[str, Any]) -> set[int]:
    """The manifest ports where the job's programs host a store that listens on every interface.

    torch's TCPStore (an `env://` program's rank 0 at MASTER_PORT, a static torchrun agent's store
    there) and torchrun's c10d rendezvous store (at the elastic policy's `rdzvPort`) bind the
    wildcard address, whatever address the job gives its replicas: on one machine two jobs with the
    same port would meet there, so locally each of these ports stands for one of the job's own.
    A rendezvous host outside the job keeps its port.
    """
    name = str(job["metadata"]["name"])
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    found: set[int] = set()
    if "Master" in replicas:
        found.add(_replica_port(spec, "Master"))
    elastic = spec.get("elasticPolicy")
    if elastic is not None and _in_job(job, str(elastic.get("rdzvHost") or f"{name}-worker-0")):
        found.add(int(elastic.get("rdzvPort") or _replica_port(spec, "Worker")))
    return found


class PyTorchJobController(Controller):
    """training-operator's PyTorchJob reconcile loop over local pods."""

    def __init__(self, obj: dict[str, Any], ctx: JobContext) -> None:
        super().__init__(obj, ctx)
        replicas = obj["spec"]["pytorchReplicaSpecs"]
        self._types = [t for t in TYPES if t in replicas]
        self._counts = {t: int(replicas[t].get("replicas", 1)) for t in self._types}
        self._policy = {t: str(replicas[t].get("restartPolicy") or "OnFailure") for t in self._types}
        self._plans: dict[tuple[str, int], PodPlan] = {}
        self._ports = {port: ctx.block.hold_port(port) for port in sorted(rendezvous_ports(obj))}
        ordinal = 0
        for rtype in self._types:
            for index in range(self._counts[rtype]):
                self._plans[(rtype, index)] = self._plan(rtype, index, ctx.block.address(ordinal))
                ordinal += 1
        self._pods: dict[tuple[str, int], LocalPod] = {}
        self._restarts = 0
        self._recreate: set[tuple[str, int]] = set()
        self._failure_detail: dict[str, str] = {}
        self._start_time = 0.0
        self.status = {"conditions": [], "replicaStatuses": {t: {} for t in self._types}}
        message = f"{KIND} {self.name} is created."
        set_kubeflow_condition(self.status, "Created", True, f"{KIND}Created", message, now=rfc3339())

    def _plan(self, rtype: str, index: int, address: str) -> PodPlan:
        replica = self.obj["spec"]["pytorchReplicaSpecs"][rtype]
        template = replica["template"]
        pod_name = f"{self.name}-{rtype.lower()}-{index}"
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/job-name": self.name,
            "training.kubeflow.org/replica-type": rtype.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
        if rtype == "Master" or ("Master" not in self._types and index == 0):
            labels["training.kubeflow.org/job-role"] = "master"
        container = main_container(template, CONTAINER)
        return PodPlan(
            name=pod_name,
            hostname=pod_name,
            replica_type=rtype,
            index=index,
            address=address,
            prefix=f"{rtype.lower()}-{index}",
            uid=f"{self.ctx.uid}-{rtype.lower()}-{index}",
            template=template,
            labels=labels,
            annotations=dict((template.get("metadata") or {}).get("annotations") or {}),
            container_name=str(container.get("name")),
            image=str(container.get("image") or ""),
            operator_env=tuple(pytorch_operator_env(self.obj, rtype, index, ports=self._ports)),
        )

    def hosts(self) -> dict[str, str]:
        """Service name → address of every replica."""
        return {plan.name: plan.address for plan in self._plans.values()}

    def pods(self) -> list[LocalPod]:
        """The current pod of each replica."""
        return [self._pods[key] for key in self._plans if key in self._pods]

    def shutdown(self, message: str) -> None:
        """Stop every pod."""
        self.stop_pods(self.pods(), phase="Failed", reason="Deleted", message=message)

    # --- reconcile -------------------------------------------------------------------------------
    def reconcile(self, now: float) -> None:
        """training-operator's ReconcileJobs + UpdateJobStatus, one pass."""
        if self._finished:
            return
        text = self.now_text(now)
        run_policy = self.obj["spec"].get("runPolicy") or {}
        if self.is_suspended():
            self._suspend(text)
            return
        if condition_is_true(self.status, "Suspended"):
            message = f"{KIND} {self.name} is resumed."
            set_kubeflow_condition(self.status, "Suspended", False, f"{KIND}Resumed", message, now=text)
            self.status["startTime"] = text
            self._start_time = now
            self.event("Normal", f"{KIND}Resumed", message)
        if "startTime" not in self.status:
            self.status["startTime"] = text
            self._start_time = now
        deadline = get_int(run_policy, "activeDeadlineSeconds", None)
        if deadline is not None and now - self._start_time >= deadline:
            self._fail(
                "DeadlineExceeded",
                f"Job {self.name} has failed because it was active longer than specified deadline",
                now,
            )
            return
        for key, plan in self._plans.items():
            pod = self._pods.get(key)
            if pod is None:
                pod = self._pods[key] = LocalPod(plan, self.ctx.pods)
                pod.start()
            elif pod.restart_at is not None and now >= pod.restart_at:
                if key in self._recreate:  # ExitCode: the operator deletes the pod and creates a new one
                    self._recreate.discard(key)
                    pod = self._pods[key] = LocalPod(plan, self.ctx.pods)
                    pod.start()
                else:
                    pod.restart_in_place()
            if pod.fatal is not None:
                self._fail(f"{KIND}Failed", pod.fatal, now)
                return
            code = pod.poll()
            if code is not None and not self._on_exit(key, pod, code, now):
                return
        self._update_status(now)

    def _on_exit(self, key: tuple[str, int], pod: LocalPod, code: int, now: float) -> bool:
        """Apply the replica's restart policy to an exited pod; False when the job failed."""
        policy = self._policy[key[0]]
        if code == 0 and policy != "Always":
            return True
        if code != 0:
            self._failure_detail[key[0]] = f"{pod.plan.name} exited with code {code}"
        if policy == "Never" or (policy == "ExitCode" and 1 <= code <= 127):
            return True  # a permanent failure: UpdateJobStatus fails the job
        self._restarts += 1
        limit = get_int(self.obj["spec"].get("runPolicy") or {}, "backoffLimit", None)
        if limit is not None and (self._restarts > 0 if limit == 0 else self._restarts >= limit):
            detail = f"{pod.plan.name} exited with code {code} (restart {self._restarts}, backoffLimit {limit})"
            self._fail(
                f"{KIND}Failed",
                f"Job {self.name} has failed because it has reached the specified backoff limit; {detail}",
                now,
            )
            return False
        delay = backoff_delay(self.ctx.restart_backoff_seconds, pod.restart_count + 1)
        pod.restart_at = now + delay
        pod.reason, pod.message = "CrashLoopBackOff", f"exit code {code}; restarting in {delay:.1f}s"
        if policy == "ExitCode":
            self._recreate.add(key)
        self.event("Warning", "Restarting", f"{pod.plan.name} exited with code {code}; restarting ({policy})")
        return True

    def _update_status(self, now: float) -> None:
        text = self.now_text(now)
        statuses: dict[str, dict[str, int]] = {}
        for rtype in self._types:
            pods = [p for k, p in self._pods.items() if k[0] == rtype]
            # A pod waiting for its restart counts as failed (whatever its exit code), so the job
            # shows Restarting until the replica runs again.
            statuses[rtype] = {
                "active": sum(1 for p in pods if p.running),
                "succeeded": sum(1 for p in pods if p.phase == "Succeeded" and p.restart_at is None),
                "failed": sum(1 for p in pods if p.phase == "Failed" or p.restart_at is not None),
            }
        self.status["replicaStatuses"] = statuses
        for rtype in self._types:
            counts, replicas = statuses[rtype], self._counts[rtype]
            running, succeeded, failed = counts["active"], counts["succeeded"], counts["failed"]
            if "Master" in self._types:
                if rtype == "Master":
                    if running > 0:
                        set_kubeflow_condition(
                            self.status, "Running", True, f"{KIND}Running", f"{KIND} {self.name} is running.", now=text
                        )
                    if succeeded == replicas:
                        self._succeed(f"{KIND} {self.name} is successfully completed.", now)
                        return
            elif rtype == "Worker":
                elastic = self.obj["spec"].get("elasticPolicy") is not None
                qualified = f"{self.ctx.namespace}/{self.name}"
                if succeeded == replicas or (elastic and succeeded > 0):
                    self._succeed(f"{KIND} {qualified} successfully completed.", now)
                    return
                if running > 0:
                    message = f"{KIND} {qualified} is running."
                    set_kubeflow_condition(self.status, "Running", True, f"{KIND}Running", message, now=text)
            if failed > 0 and replicas > succeeded + running:
                permanent = any(
                    p.phase == "Failed" and p.restart_at is None for k, p in self._pods.items() if k[0] == rtype
                )
                if permanent:
                    detail = self._failure_detail.get(rtype, "")
                    message = f"{KIND} {self.name} is failed because {failed} {rtype} replica(s) failed."
                    self._fail(f"{KIND}Failed", f"{message} {detail}".strip(), now)
                    return
                message = f"{KIND} {self.name} is restarting because {failed} {rtype} replica(s) failed."
                set_kubeflow_condition(self.status, "Restarting", True, f"{KIND}Restarting", message, now=text)

    def _succeed(self, message: str, now: float) -> None:
        text = self.now_text(now)
        self.status.setdefault("completionTime", text)
        set_kubeflow_condition(self.status, "Succeeded", True, f"{KIND}Succeeded", message, now=text)
        self.event("Normal", f"{KIND}Succeeded", message)
        self.stop_pods(self.pods(), phase="Succeeded", reason="JobSucceeded", message="stopped: the job succeeded")
        for counts in self.status["replicaStatuses"].values():
            counts["succeeded"] = counts.get("succeeded", 0) + counts.get("active", 0)
            counts["active"] = 0
        self._finished = True

    def _fail(self, reason: str, message: str, now: float) -> None:
        text = self.now_text(now)
        self.status.setdefault("completionTime", text)
        set_kubeflow_condition(self.status, "Failed", True, reason, message, now=text)
        self.event("Normal", f"{KIND}Failed", message)
        self.stop_pods(self.pods(), phase="Failed", reason=reason, message=message)
        for counts in (self.status.get("replicaStatuses") or {}).values():
            counts["active"] = 0
        self._finished = True

    def _suspend(self, text: str) -> None:
        message = f"{KIND} {self.name} is suspended."
        if self._pods:
            self.stop_pods(self.pods(), phase="Failed", reason="Suspended", message=message)
            self._pods.clear()
        for counts in self.status["replicaStatuses"].values():
            counts["active"] = 0
        if condition_is_true(self.status, "Running"):
            set_kubeflow_condition(self.status, "Running", False, f"{KIND}Suspended", message, now=text)
        if not condition_is_true(self.status, "Suspended"):
            set_kubeflow_condition(self.status, "Suspended", True, f"{KIND}Suspended", message, now=text)
            self.event("Normal", f"{KIND}Suspended", message)
