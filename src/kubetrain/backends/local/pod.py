"""One local "pod": its process, restarts, readiness probe and logs.

Controllers (PyTorchJob, MPIJob launcher, JobSet child Jobs) decide when a pod starts, restarts
or stops; a LocalPod does it the way the kubelet would: translate the main container to this
machine (`podspec`), start it in its own session, restart it in place (emptyDirs kept), run
its readiness probe, stop it with a grace period. Only the pod's main container runs; init
containers and sidecars are reported in a Warning event and skipped.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from kubetrain.backends.base import PodInfo
from kubetrain.backends.local.env import expand_references, resolve_command
from kubetrain.backends.local.logfile import LogStream
from kubetrain.backends.local.podspec import (
    ContainerTranslator,
    PodContext,
    PodPlan,
    PodStartError,
    main_container,
)
from kubetrain.backends.local.probe import ProbeLoop, build_check
from kubetrain.backends.local.process import ReplicaProcess

DEFAULT_GRACE_SECONDS = 30.0


class LocalPod:
    """A pod's runtime state and its current process."""

    def __init__(self, plan: PodPlan, ctx: PodContext) -> None:
        self.plan = plan
        self.ctx = ctx
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.restart_count = 0
        self.exit_code: int | None = None
        self.fatal: str | None = None
        self.created = datetime.now(UTC)
        self.restart_at: float | None = None  # when a pending in-place restart is due
        self._process: ReplicaProcess | None = None
        self._probe: ProbeLoop | None = None
        self._logs: list[Path] = []
        self._streams: list[LogStream] = []
        self.pod_dir = ctx.job_dir / "pods" / plan.name
        # A new pod gets fresh emptyDir volumes, even when it reuses a name.
        shutil.rmtree(self.pod_dir / "volumes", ignore_errors=True)
        self._container = main_container(plan.template, plan.container_name)
        self._translator = ContainerTranslator(plan, ctx, self._container, self.pod_dir)
        self._warn_skipped_containers()

    # --- what the controllers read ---------------------------------------------------------
    @property
    def running(self) -> bool:
        """The main process is alive."""
        return self._process is not None and self.phase == "Running"

    @property
    def ready(self) -> bool:
        """Running and, if it has a readiness probe, passing it."""
        if not self.running:
            return False
        return self._probe.ready if self._probe is not None else True

    def info(self) -> PodInfo:
        """The pod as the launcher sees it."""
        return PodInfo(
            name=self.plan.name,
            replica_type=self.plan.replica_type,
            index=self.plan.index,
            phase=self.phase,
            container=str(self._container.get("name") or ""),
            reason=self.reason,
            message=self.message,
            restart_count=self.restart_count,
            exit_code=self.exit_code,
            created=self.created,
        )

    def log_file(self, *, previous: bool) -> tuple[Path | None, LogStream | None]:
        """The current (or previous) container's log file and, if still written, its stream."""
        idx = len(self._logs) - (2 if previous else 1)
        if idx < 0:
            return None, None
        stream = self._streams[idx] if idx < len(self._streams) else None
        return self._logs[idx], stream

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or restart) the container. A pod that cannot run here becomes Failed with `fatal` set."""
        self.restart_at = None
        try:
            argv, env, cwd = self._translator.launch()
            log = LogStream(self.ctx.next_log_path(self.plan.name), max_bytes=self.ctx.max_log_bytes)
            self._logs.append(log.path)
            self._streams.append(log)
            self._process = ReplicaProcess(
                argv=argv,
                env=env,
                cwd=cwd,
                log=log,
                prefix=self.plan.prefix,
                sink=self.ctx.sink,
                registry=self.ctx.registry,
                on_output_closed=self.ctx.wake,
                grace_seconds=self._grace(),
            )
        except PodStartError as e:
            self._cannot_run(str(e))
            return
        except OSError as e:  # volumes, log file or fork: this machine refused, not the program
            self._cannot_run(str(self._translator.fail(f"cannot start the container: {e}")))
            return
        self.phase, self.reason, self.message, self.exit_code = "Running", "", "", None
        self.ctx.event(
            "Normal",
            "Started",
            f"Started container {self._container.get('name')} (pid {self._process.pid}) at {self.plan.address}",
            f"Pod/{self.plan.name}",
        )
        probe = self._container.get("readinessProbe")
        if probe:
            check = build_check(
                probe,
                address=self.plan.address,
                ports=self._translator.named_ports(),
                exec_argv=lambda a: resolve_command(
                    [self._translator.rewriter().rewrite(expand_references(x, env)) for x in a], env.get("PATH", "")
                ),
                env=env,
            )
            self._probe = ProbeLoop(check, probe, max_period=self.ctx.probe_period_seconds, on_change=self.ctx.wake)

    def _cannot_run(self, message: str) -> None:
        self.fatal = message
        self.phase, self.reason, self.message = "Failed", "ContainerCannotRun", message
        self.ctx.event("Warning", "Failed", message, f"Pod/{self.plan.name}")

    def poll(self) -> int | None:
        """The exit code if the container has just exited (phase becomes Succeeded or Failed)."""
        if self._process is None or self.phase != "Running":
            return None
        code = self._process.poll()
        if code is None:
            return None
        self._after_exit(code)
        self.ctx.event(
            "Normal" if code == 0 else "Warning",
            "Completed" if code == 0 else "Error",
            f"container exited with code {code}",
            f"Pod/{self.plan.name}",
        )
        return code

    def restart_in_place(self) -> None:
        """The kubelet restarting the container (restartPolicy OnFailure/Always): emptyDirs stay."""
        self.restart_count += 1
        self.start()

    def stop(self, *, phase: str, reason: str, message: str) -> None:
        """Kill the container's processes (SIGTERM, then SIGKILL after the grace period) and reap them."""
        if self._process is not None and self.phase == "Running":
            code = self._process.stop(self._grace())
            self.exit_code = code
            self.ctx.event("Normal", "Killing", f"Stopping container: {message}", f"Pod/{self.plan.name}")
        if self._probe is not None:
            self._probe.stop()
            self._probe = None
        self.phase, self.reason, self.message, self.restart_at = phase, reason, message, None

    def _after_exit(self, code: int) -> None:
        if self._probe is not None:
            self._probe.stop()
            self._probe = None
        self.exit_code = code
        self.phase = "Succeeded" if code == 0 else "Failed"
        self.reason = "Completed" if code == 0 else "Error"
        self.message = f"exit code {code}"

    def _grace(self) -> float:
        declared = self.plan.template.get("spec", {}).get("terminationGracePeriodSeconds")
        grace = float(declared) if isinstance(declared, int | float) else DEFAULT_GRACE_SECONDS
        return min(grace, self.ctx.max_grace_seconds)

    # --- translation ------------------------------------------------------------------------
    def _warn_skipped_containers(self) -> None:
        spec = self.plan.template.get("spec", {})
        skipped = [str(c.get("name")) for c in spec.get("initContainers") or []]
        skipped += [
            str(c.get("name")) for c in spec.get("containers") or [] if c.get("name") != self._container.get("name")
        ]
        if skipped:
            self.ctx.event(
                "Warning",
                "NotRunLocally",
                f"the local backend runs only container {self._container.get('name')!r}; skipped: {', '.join(skipped)}",
                f"Pod/{self.plan.name}",
            )
