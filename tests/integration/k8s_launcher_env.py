"""The launcher against tests/fake_apiserver.py, the in-process stand-in for the API server: the
manifests the tests submit, and `Env`, which runs the launcher while a script plays the operator.

The stand-in is NOT a cluster: no operator, no kubelet, no scheduler. The operator's part
(conditions, pods, logs, events) is played by the tests' scripts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.backends.kubernetes import KubernetesBackend, RetryPolicy
from kubetrain.launcher import AwaitOptions, DeleteAfter, OnTimeout, Tuning, run_job
from kubetrain.manifests import build_mpijob, build_ps_jobset, build_pytorchjob, build_trainjob
from kubetrain.manifests.kinds import JOBSET, JobKind
from kubetrain.specs import MPIJobSpec, PSJobSpec, PyTorchJobSpec, TrainJobSpec
from kubetrain.specs.common import ReplicaSpec
from kubetrain.specs.jobs import JobMeta
from kubetrain.status import JobResult
from tests.fake_apiserver import HANG_GUARD_S, FakeApiServer, Request, make_pod

NS = "team-a"


RUN, TASK = "run-7f3a", "task-91c2"


IMAGE = "example.com/train:1"


FAST = Tuning(pending_poll_seconds=0.2, watch_window_seconds=3.0, log_drain_seconds=5.0, log_tail_lines=5)


def meta(name: str, run: str = RUN, task: str = TASK) -> JobMeta:
    return JobMeta(name=name, namespace=NS, kfp_run_id=run, kfp_task_id=task)


def pytorch_manifest(name: str = "train", workers: int = 1, **kw: str) -> dict[str, Any]:
    worker = ReplicaSpec(image=IMAGE, replicas=workers) if workers else None
    return build_pytorchjob(PyTorchJobSpec(meta=meta(name, **kw), master=ReplicaSpec(image=IMAGE), worker=worker))


def mpi_manifest(name: str = "mpi") -> dict[str, Any]:
    return build_mpijob(
        MPIJobSpec(meta=meta(name), launcher=ReplicaSpec(image=IMAGE), worker=ReplicaSpec(image=IMAGE, replicas=2))
    )


def ps_manifest(name: str = "ps") -> dict[str, Any]:
    return build_ps_jobset(
        PSJobSpec(
            meta=meta(name),
            master=ReplicaSpec(image=IMAGE),
            ps=ReplicaSpec(image=IMAGE, replicas=2),
            worker=ReplicaSpec(image=IMAGE, replicas=2),
        )
    )


def trainjob_manifest(name: str = "tj") -> dict[str, Any]:
    return build_trainjob(TrainJobSpec(meta=meta(name), runtime="torch-distributed", trainer=ReplicaSpec(image=IMAGE)))


def foreground(uid: str) -> dict[str, Any]:
    """The options of the launcher's delete: foreground, and only the job of this uid."""
    return {"propagationPolicy": "Foreground", "preconditions": {"uid": uid}}


def cond(ctype: str, reason: str = "", message: str = "", status: str = "True") -> tuple[str, str, str, str]:
    return (ctype, status, reason, message)


@dataclass
class Env:
    """One stand-in API server, a kubeconfig pointing at it, and the launcher's output."""

    api: FakeApiServer
    kubeconfig: Path
    lines: list[str] = field(default_factory=list)

    def sink(self, line: str) -> None:
        with self.api.cv:
            self.lines.append(line)
            self.api.cv.notify_all()

    def wait_line(self, text: str) -> None:
        self.api.wait_until(lambda: any(text in line for line in self.lines), f"a launcher line with {text!r}")

    def backend(self, **kw: Any) -> KubernetesBackend:
        retry = kw.pop("retry", RetryPolicy(attempts=6, initial_delay_seconds=0.01, max_delay_seconds=0.05))
        return KubernetesBackend(kubeconfig=str(self.kubeconfig), retry=retry, server_watch_seconds=5, **kw)

    def launch(
        self,
        manifest: dict[str, Any],
        script: Callable[[FakeApiServer], None] | None = None,
        *,
        timeout: float = 2 * HANG_GUARD_S,  # a hang guard above the scripts' own waits
        delete_after: DeleteAfter = "success",
        on_timeout: OnTimeout = "delete",
        backend: KubernetesBackend | None = None,
        tuning: Tuning = FAST,
        start_timeout: float | None = None,
    ) -> JobResult:
        """run_job in this thread while `script` plays the operator; the script's errors surface too."""
        errors: list[BaseException] = []

        def play() -> None:
            try:
                if script is not None:
                    script(self.api)
            except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
                errors.append(e)

        player = threading.Thread(target=play, daemon=True)
        player.start()
        be = backend or self.backend()
        try:
            options = AwaitOptions(
                timeout_seconds=timeout,
                delete_after=delete_after,
                on_timeout=on_timeout,
                tuning=tuning,
                start_timeout_seconds=start_timeout,
            )
            return run_job(manifest, backend=be, options=options, log_sink=self.sink)
        finally:
            be.close()
            player.join(20)
            if errors:
                raise errors[0]

    def created_uid(self, name: str) -> str:
        """The uid of the job `name` the launcher's create made (from the ADDED event it caused)."""
        with self.api.cv:
            return next(
                str(obj["metadata"]["uid"])
                for _, etype, key, obj in self.api.history
                if etype == "ADDED" and key[2] == name and key[0] != "pods"
            )

    def requests(self, verb: str, resource: str) -> list[Request]:
        with self.api.cv:
            return [r for r in self.api.requests if r.verb == verb and r.resource == resource]


def play_success(env: Env, kind: JobKind, name: str, replicas: list[tuple[str, int]], log: list[str],
                 container: str = "pytorch") -> Callable[[FakeApiServer], None]:  # fmt: skip
    """Pods Pending → Running → Succeeded, conditions Created → Running → Succeeded, a log on rank 0."""

    def script(api: FakeApiServer) -> None:
        api.wait_job(kind, NS, name)
        pods = [make_pod(name, NS, kind=kind, replica_type=t, index=i, container=container) for t, i in replicas]
        for pod in pods:
            api.put_pod(pod)
        api.set_conditions(kind, NS, name, cond("Created", f"{kind.kind}Created"))
        # Pods and the job come through two watches: each line says only what its own watch saw.
        env.wait_line("Pending (ContainerCreating)")
        env.wait_line("→ Created")
        for t, i in replicas:
            api.put_pod(make_pod(name, NS, kind=kind, replica_type=t, index=i, phase="Running", container=container))
        api.set_conditions(kind, NS, name, cond("Created"), cond("Running", f"{kind.kind}Running"),
                           startTime="2025-03-01T10:00:00Z")  # fmt: skip
        primary = pods[0]["metadata"]["name"]
        api.append_log(NS, primary, container, *log)
        env.wait_line(log[-1])
        for t, i in replicas:
            api.put_pod(make_pod(name, NS, kind=kind, replica_type=t, index=i, phase="Succeeded", container=container))
        done = "Completed" if kind is JOBSET else "Succeeded"
        api.set_conditions(kind, NS, name, cond("Created"), cond("Running", status="False"), cond(done, "AllDone"),
                           startTime="2025-03-01T10:00:00Z", completionTime="2025-03-01T10:05:00Z")  # fmt: skip

    return script
