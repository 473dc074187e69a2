"""MPIJob (`kubeflow.org/v2beta1`) run locally as mpi-operator v0.8 runs it.

On a cluster the launcher is a batch Job whose pod runs `mpirun`, which reaches N worker pods
over SSH through the hostfile `/etc/mpi/hostfile` (`<job>-worker-<i>.<job>.<ns>.svc slots=S`).
Locally there are no worker pods and no sshd: the workers' slots are mapped onto this machine.

- The launcher runs its command with the env mpi-operator sets (K_MPI_JOB_ROLE, OMPI_MCA_orte_*
  or the Intel/MPICH equivalents, NVIDIA_* emptied) and `/etc/mpi` translated to a local
  directory whose `hostfile` reads `localhost slots=<workers × slotsPerWorker>` (`localhost:<n>`
  for Intel/MPICH) and whose `discover_hosts.sh` prints `localhost:<n>`. Open MPI launches ranks on
  `localhost` without ssh. Worker host names in the launcher's args and env (`--host
  job-worker-0,...`) become `localhost` for the same reason.
- Locally added, before the manifest's own env (so the manifest can override them):
  `OMPI_MCA_rmaps_base_oversubscribe=1` (more ranks than cores) and, as root,
  `OMPI_ALLOW_RUN_AS_ROOT=1`/`OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`.
- Workers are listed as pods that count as Running while the launcher runs; their command
  (sshd) is not run. Success and failure follow the launcher Job: its pod restart policy, the
  run policy's backoffLimit (default 6) and activeDeadlineSeconds.
- Conditions: Created, Running (launcher running), Succeeded, Failed (reason from the launcher
  Job: `BackoffLimitExceeded/<pod reason>`, `DeadlineExceeded`), Suspended; never Restarting.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from kubetrain.backends.base import PodInfo
from kubetrain.backends.local.conditions import condition_is_true, rfc3339, set_kubeflow_condition
from kubetrain.backends.local.env import env_items
from kubetrain.backends.local.operators.batchjob import BatchJob
from kubetrain.backends.local.operators.controller import Controller, JobContext, random_suffix
from kubetrain.backends.local.pod import LocalPod
from kubetrain.backends.local.podspec import PodPlan, main_container

KIND = "MPIJob"
CONFIG_MOUNT = "/etc/mpi"
HOSTFILE = f"{CONFIG_MOUNT}/hostfile"


def mpi_operator_env(job: dict[str, Any], slots: int) -> list[dict[str, str]]:
    """The env mpi-operator v0.8 appends to the launcher's container[0]."""
    spec = job["spec"]
    impl = str(spec.get("mpiImplementation") or "OpenMPI")
    pairs: list[tuple[str, str]] = [("K_MPI_JOB_ROLE", "launcher")]
    if impl == "OpenMPI":
        pairs += [
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_orte_default_hostfile", HOSTFILE),
            ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
            ("OMPI_MCA_orte_set_default_slots", str(slots)),
        ]
    elif impl == "Intel":
        pairs += [
            ("I_MPI_HYDRA_HOST_FILE", HOSTFILE),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"),
            ("I_MPI_PERHOST", str(slots)),
        ]
    else:
        pairs += [("HYDRA_HOST_FILE", HOSTFILE), ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10")]
    if not spec.get("runLauncherAsWorker"):
        pairs += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    return env_items(pairs)


def local_mpi_env() -> list[dict[str, str]]:
    """What running mpirun on this machine needs and a pod would not."""
    # Every worker's slots land on this one machine, usually more ranks than cores: let Open MPI
    # oversubscribe, and make waiting ranks yield the CPU instead of busy-polling, which ran the
    # ChainerMN benchmark about 37 times slower on two cores.
    pairs = [("OMPI_MCA_rmaps_base_oversubscribe", "1"), ("OMPI_MCA_mpi_yield_when_idle", "1")]
    if os.geteuid() == 0:
        pairs += [("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")]
    return env_items(pairs)


class MPIJobController(Controller):
    """mpi-operator's reconcile loop: a launcher Job and virtual workers."""

    def __init__(self, obj: dict[str, Any], ctx: JobContext) -> None:
        super().__init__(obj, ctx)
        spec = obj["spec"]
        replicas = spec["mpiReplicaSpecs"]
        self._launcher_spec = replicas["Launcher"]
        self._workers = int((replicas.get("Worker") or {}).get("replicas", 0))
        slots_per_worker = int(spec.get("slotsPerWorker") or 1)
        self._slots = slots_per_worker
        total = (self._workers + (1 if spec.get("runLauncherAsWorker") else 0)) * slots_per_worker
        self._total_slots = max(total, 1)
        self._config_dir = ctx.pods.job_dir / "etc-mpi"
        self._write_config(str(spec.get("mpiImplementation") or "OpenMPI"))
        self._launcher_address = ctx.block.address(0)
        self._launcher: BatchJob | None = None
        self._start_time = 0.0
        self._created = datetime.now(UTC)
        self.status = {"conditions": [], "replicaStatuses": {"Launcher": {}, "Worker": {}}}
        message = f"{KIND} {ctx.namespace}/{self.name} is created."
        set_kubeflow_condition(self.status, "Created", True, f"{KIND}Created", message, now=rfc3339())

    def _write_config(self, impl: str) -> None:
        self._config_dir.mkdir(parents=True, exist_ok=True)
        line = f"localhost slots={self._total_slots}" if impl == "OpenMPI" else f"localhost:{self._total_slots}"
        (self._config_dir / "hostfile").write_text(line + "\n")
        script = self._config_dir / "discover_hosts.sh"
        script.write_text(f"#!/bin/sh\necho localhost:{self._total_slots}\n")
        script.chmod(0o555)

    def _worker_hosts(self) -> dict[str, str]:
        hosts = {}
        for i in range(self._workers):
            hosts[f"{self.name}-worker-{i}.{self.name}"] = "localhost"
            hosts[f"{self.name}-worker-{i}"] = "localhost"
        return hosts

    def _make_launcher_pod(self, index: int) -> LocalPod:
        template = self._launcher_spec["template"]
        container = main_container(template, None)
        job_name = f"{self.name}-launcher"
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": self.name,
            "training.kubeflow.org/job-role": "launcher",
            "batch.kubernetes.io/job-name": job_name,
            "job-name": job_name,
        }
        plan = PodPlan(
            name=f"{job_name}-{random_suffix()}",
            hostname=job_name,
            replica_type="Launcher",
            index=index,
            address=self._launcher_address,
            prefix="launcher",
            uid=f"{self.ctx.uid}-launcher-{random_suffix()}",
            template=template,
            labels=labels,
            annotations=dict((template.get("metadata") or {}).get("annotations") or {}),
            container_name=str(container.get("name")),
            image=str(container.get("image") or ""),
            operator_env=tuple(mpi_operator_env(self.obj, self._slots)),
            local_env=tuple(local_mpi_env()),
            extra_mounts={CONFIG_MOUNT: str(self._config_dir)},
            host_overrides=self._worker_hosts(),
        )
        return LocalPod(plan, self.ctx.pods)

    def _new_launcher(self) -> BatchJob:
        run_policy = self.obj["spec"].get("runPolicy") or {}
        job_spec: dict[str, Any] = {
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"restartPolicy": self._launcher_spec.get("restartPolicy") or "OnFailure"}},
        }
        for key in ("backoffLimit", "activeDeadlineSeconds"):
            if run_policy.get(key) is not None:
                job_spec[key] = run_policy[key]
        return BatchJob(
            name=f"{self.name}-launcher",
            spec=job_spec,
            make_pod=self._make_launcher_pod,
            restart_backoff_seconds=self.ctx.restart_backoff_seconds,
        )

    def hosts(self) -> dict[str, str]:
        """The launcher's host names → its address (workers have none: they are not run)."""
        return {
            f"{self.name}-launcher.{self.name}": self._launcher_address,
            f"{self.name}-launcher": self._launcher_address,
        }

    def pods(self) -> list[LocalPod]:
        """The launcher's pods."""
        return self._launcher.all_pods() if self._launcher is not None else []

    def extra_pod_infos(self) -> list[Any]:
        """The workers, whose sshd is not run: Running while the launcher runs."""
        clean = str((self.obj["spec"].get("runPolicy") or {}).get("cleanPodPolicy") or "None")
        if self._finished and clean in ("Running", "All"):
            return []  # deleted with the job's end, as cleanPodPolicy asks
        if self._launcher is None or self.is_suspended():
            phase = "Pending"
        elif self._finished:
            phase = "Succeeded" if condition_is_true(self.status, "Succeeded") else "Failed"
        else:
            phase = "Running"
        worker_spec = self.obj["spec"]["mpiReplicaSpecs"].get("Worker")
        if not worker_spec or not self._workers:
            return []
        container = main_container(worker_spec["template"], None)
        return [
            PodInfo(
                name=f"{self.name}-worker-{i}",
                replica_type="Worker",
                index=i,
                phase=phase,
                container=str(container.get("name")),
                reason="NotRunLocally",
                message="the local backend runs the launcher's ranks on this machine; the worker's sshd does not run",
                created=self._created,
            )
            for i in range(self._workers)
        ]

    def shutdown(self, message: str) -> None:
        """Stop the launcher."""
        if self._launcher is not None:
            self._launcher.stop(phase="Failed", reason="Deleted", message=message)

    def reconcile(self, now: float) -> None:
        """mpi-operator's syncHandler + updateMPIJobStatus, one pass."""
        if self._finished:
            return
        text = self.now_text(now)
        qualified = f"{self.ctx.namespace}/{self.name}"
        if self.is_suspended():
            message = f"{KIND} {qualified} is suspended."
            if self._launcher is not None:
                self._launcher.stop(phase="Failed", reason="Suspended", message=message)
                self._launcher = None
            self.status["replicaStatuses"] = {"Launcher": {}, "Worker": {}}
            set_kubeflow_condition(self.status, "Running", False, f"{KIND}Suspended", message, now=text)
            if not condition_is_true(self.status, "Suspended"):
                set_kubeflow_condition(self.status, "Suspended", True, f"{KIND}Suspended", message, now=text)
                self.event("Normal", f"{KIND}Suspended", message)
            return
        if condition_is_true(self.status, "Suspended"):
            message = f"{KIND} {qualified} is resumed."
            set_kubeflow_condition(self.status, "Suspended", False, f"{KIND}Resumed", message, now=text)
            self.status.pop("startTime", None)
            self.event("Normal", f"{KIND}Resumed", message)
        if "startTime" not in self.status:
            self.status["startTime"] = text
            self._start_time = now
        if self._launcher is None:
            self._launcher = self._new_launcher()
        launcher = self._launcher
        launcher.step(now)
        running = launcher.active
        self.status["replicaStatuses"] = {
            "Launcher": {"active": running, "succeeded": 0, "failed": launcher.failed_pods},
            "Worker": {"active": self._workers if running else 0, "succeeded": 0, "failed": 0},
        }
        outcome = launcher.outcome
        if outcome is not None and outcome.type == "Complete":
            self.status["replicaStatuses"]["Launcher"]["succeeded"] = 1
            self.status.setdefault("completionTime", self.now_text(outcome.time))
            message = f"{KIND} {qualified} successfully completed."
            set_kubeflow_condition(self.status, "Succeeded", True, f"{KIND}Succeeded", message, now=text)
            self.event("Normal", f"{KIND}Succeeded", message)
            self._finished = True
        elif outcome is not None:
            reason, message = outcome.reason, outcome.message
            if launcher.fatal is not None:
                reason = f"{KIND}Failed"
            elif reason == "BackoffLimitExceeded":
                reason += "/Error"  # + the last failed pod's reason, as mpi-operator writes it
            self.status.setdefault("completionTime", text)
            set_kubeflow_condition(self.status, "Failed", True, reason, message, now=text)
            self.event("Warning", reason, message)
            self._finished = True
        elif running:
            message = f"{KIND} {qualified} is running."
            set_kubeflow_condition(self.status, "Running", True, f"{KIND}Running", message, now=text)
        if self._finished:
            self.status["replicaStatuses"]["Worker"]["active"] = 0
            self.status["replicaStatuses"]["Launcher"]["active"] = 0
