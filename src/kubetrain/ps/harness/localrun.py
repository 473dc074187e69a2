"""Run a PS job as local processes on loopback addresses: the harness of tests and benchmarks.

One master, P shards and W workers, each its own `python -m kubetrain.ps.*` process, the servers
on their own 127.x.y.z address (as the local backend gives each replica its own address), with
health checks, kills (SIGKILL, as a node loss) and restarts on the same address. Logs go to
`workdir/logs/<role>-<i>.log`; workers append their trained batches to
`workdir/trained/<worker>.jsonl` for accounting. Like the JobSet, every worker sees the master's
state dir as `$KUBETRAIN_PS_STATE_DIR` (`worker_state_dir=False` hides it: workers then only
have their retry deadline). A worker added with `gated=True` reaches the master through a
MasterGate, so a test can hold it between tasks (`hold`, `release`) to create the state it
asserts on instead of racing towards it, and wait for one to be handed a task (`tasks_given`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kubetrain.data.dataset_format import read_dataset_info
from kubetrain.ps.common.errors import PSConfigError, PSUnavailableError
from kubetrain.ps.common.jobtoken import ensure_token
from kubetrain.ps.common.outcome import STATE_DIR_ENV
from kubetrain.ps.common.rpc import wait_serving
from kubetrain.ps.harness.accounting import Audit, audit, read_generations
from kubetrain.ps.harness.gate import MasterGate

__all__ = ["LocalPSJob", "free_port", "wait_until"]


def free_port(host: str) -> int:
    """A TCP port nothing listens on at `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], *, deadline_s: float, what: str, every_s: float = 0.1) -> None:
    """Poll `check` until it is true; PSUnavailableError naming `what` after `deadline_s`."""
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            raise PSUnavailableError(f"timed out after {deadline_s:.0f}s waiting for {what}")
        time.sleep(every_s)


@dataclass
class _Proc:
    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0


@dataclass
class LocalPSJob:
    """A local PS job. Use as a context manager: every process is killed on exit."""

    workdir: Path
    data: Path
    num_ps: int = 2
    num_workers: int = 3
    mode: str = "async"
    model: str = "mlp"
    epochs: int = 2
    records_per_task: int = 64
    master_args: Sequence[str] = ()
    ps_args: Sequence[str] = ()
    worker_args: Sequence[str] = ()
    worker_state_dir: bool = True
    python: str = sys.executable
    procs: dict[tuple[str, int], _Proc] = field(default_factory=dict)
    gate: MasterGate | None = None
    token_file: Path = field(init=False)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        for sub in ("logs", "trained", "state", "checkpoints", "output"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        # Where the JobSet keeps it: the job's state dir (ps.common.jobtoken).
        self.token_file = self.workdir / "state" / "job-token"
        # A random 127.a.b.0/24 keeps concurrent jobs (other engineers' tests) apart.
        a, b = random.randint(1, 254), random.randint(1, 254)
        self.master_host = f"127.{a}.{b}.1"
        self.ps_hosts = [f"127.{a}.{b}.{10 + i}" for i in range(self.num_ps)]
        self.master_addr = f"{self.master_host}:{free_port(self.master_host)}"
        self.ps_addrs = [f"{h}:{free_port(h)}" for h in self.ps_hosts]
        base_env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        w = self.workdir
        self._add(
            "master",
            0,
            self.master_host,
            [
                "-m",
                "kubetrain.ps.master",
                "--port",
                self.master_addr.rsplit(":", 1)[1],
                "--data",
                str(self.data),
                "--output",
                str(w / "output"),
                "--state-dir",
                str(w / "state"),
                "--num-ps",
                str(self.num_ps),
                "--ps-addrs",
                ",".join(self.ps_addrs),
                "--epochs",
                str(self.epochs),
                "--records-per-task",
                str(self.records_per_task),
                "--mode",
                self.mode,
                "--model",
                self.model,
                "--job-token-file",
                str(self.token_file),
                *self.master_args,
            ],
            base_env,
        )
        for i, addr in enumerate(self.ps_addrs):
            self._add(
                "ps",
                i,
                self.ps_hosts[i],
                [
                    "-m",
                    "kubetrain.ps.server",
                    "--port",
                    addr.rsplit(":", 1)[1],
                    "--shard-index",
                    str(i),
                    "--num-shards",
                    str(self.num_ps),
                    "--checkpoint-dir",
                    str(w / "checkpoints"),
                    "--job-token-file",
                    str(self.token_file),
                    "--mode",
                    self.mode,
                    *self.ps_args,
                ],
                base_env,
            )

    def _add(self, role: str, index: int, host: str | None, argv: list[str], env: dict[str, str]) -> None:
        env = dict(env)
        if host is not None:
            env["KUBETRAIN_BIND_ADDRESS"] = host
        self.procs[(role, index)] = _Proc(role, index, argv, env, self.workdir / "logs" / f"{role}-{index}.log")

    def add_worker(self, index: int, extra: Sequence[str] = (), *, gated: bool = False) -> None:
        """Declare worker `index` (with extra flags, e.g. `--slowdown 4`); `gated`: through the gate."""
        master = self.master_addr
        if gated:
            if self.gate is None:
                self.gate = MasterGate(
                    self.master_addr, self.master_host.rsplit(".", 1)[0] + ".2", token=ensure_token(self.token_file)
                )
            master = self.gate.addr
        self._add(
            "worker",
            index,
            None,
            [
                "-m",
                "kubetrain.ps.worker",
                "--master",
                master,
                "--ps-addrs",
                ",".join(self.ps_addrs),
                "--data",
                str(self.data),
                "--worker-id",
                f"worker-{index}",
                "--job-token-file",
                str(self.token_file),
                "--trained-log",
                str(self.workdir / "trained" / f"worker-{index}.jsonl"),
                *self.worker_args,
                *extra,
            ],
            self._worker_env(),
        )

    def _worker_env(self) -> dict[str, str]:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        env.pop(STATE_DIR_ENV, None)
        if self.worker_state_dir:
            env[STATE_DIR_ENV] = str(self.workdir / "state")
        return env

    def hold(self, *workers: int) -> None:
        """Give these gated workers no new task until `release` (they finish the one they have)."""
        for i in workers:
            self._gate_of(i).hold(f"worker-{i}")

    def release(self, *workers: int) -> None:
        """Let these gated workers take tasks again."""
        for i in workers:
            self._gate_of(i).release(f"worker-{i}")

    def tasks_given(self, index: int) -> int:
        """How many tasks the master has handed to this gated worker so far."""
        return self._gate_of(index).tasks_given(f"worker-{index}")

    def _gate_of(self, index: int) -> MasterGate:
        p = self.procs.get(("worker", index))
        if p is None or self.gate is None or self.gate.addr not in p.argv:
            raise PSConfigError(
                f"worker-{index}: not added with gated=True; add_worker({index}, gated=True) puts it behind the gate"
            )
        return self.gate

    # ----------------------------------------------------------------------------- processes

    def start(self, role: str, index: int = 0) -> None:
        """Start (or restart) one process, appending to its log."""
        p = self.procs[(role, index)]
        if p.popen is not None and p.popen.poll() is None:
            raise PSUnavailableError(f"{role}-{index} is already running (pid {p.popen.pid})")
        with open(p.log, "ab") as log:
            p.popen = subprocess.Popen([self.python, *p.argv], stdout=log, stderr=subprocess.STDOUT, env=p.env)
        p.starts += 1

    def start_all(self, *, deadline_s: float = 120.0) -> None:
        """Shards and master first, each waited for until SERVING, then the declared workers."""
        for i in range(self.num_ps):
            self.start("ps", i)
        self.start("master")
        for i in range(self.num_ps):
            self.wait_serving("ps", i, deadline_s=deadline_s)
        self.wait_serving("master", 0, deadline_s=deadline_s)
        if not any(r == "worker" for r, _ in self.procs):
            for i in range(self.num_workers):
                self.add_worker(i)
        for (role, i), p in sorted(self.procs.items()):
            if role == "worker" and p.popen is None:
                self.start("worker", i)

    def addr(self, role: str, index: int = 0) -> str:
        """The gRPC address of the master or a shard."""
        return self.master_addr if role == "master" else self.ps_addrs[index]

    def wait_serving(self, role: str, index: int = 0, *, deadline_s: float = 120.0) -> None:
        """Block until the process answers SERVING; fails early if it exited."""
        p = self.procs[(role, index)]
        end = time.monotonic() + deadline_s
        while True:
            if p.popen is not None and p.popen.poll() is not None:
                raise PSUnavailableError(f"{role}-{index} exited with {p.popen.returncode}: {self.tail(role, index)}")
            try:
                wait_serving(self.addr(role, index), deadline_s=min(2.0, max(0.1, end - time.monotonic())))
                return
            except PSUnavailableError:
                if time.monotonic() > end:
                    raise

    def kill(self, role: str, index: int = 0, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL: no clean-up at all) and reap the process."""
        p = self.procs[(role, index)]
        if p.popen is not None and p.popen.poll() is None:
            p.popen.send_signal(sig)
            p.popen.wait(timeout=30)

    def returncode(self, role: str, index: int = 0) -> int | None:
        """The exit code, None while running (or never started)."""
        p = self.procs[(role, index)]
        return None if p.popen is None else p.popen.poll()

    def wait_exit(self, role: str, index: int = 0, *, deadline_s: float) -> int:
        """Wait for one process to exit; its exit code."""
        p = self.procs[(role, index)]
        if p.popen is None:
            raise PSUnavailableError(f"{role}-{index} was never started")
        try:
            return p.popen.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            raise PSUnavailableError(
                f"{role}-{index} still running after {deadline_s:.0f}s: {self.tail(role, index)}"
            ) from None

    def wait_all(self, *, deadline_s: float) -> dict[str, int]:
        """Wait for the master and then every other process; {"role-i": exit code}."""
        end = time.monotonic() + deadline_s
        out = {"master-0": self.wait_exit("master", deadline_s=deadline_s)}
        for (role, i), p in sorted(self.procs.items()):
            if role != "master" and p.popen is not None:
                out[f"{role}-{i}"] = self.wait_exit(role, i, deadline_s=max(1.0, end - time.monotonic()))
        return out

    def tail(self, role: str, index: int = 0, lines: int = 30) -> str:
        """The end of a process's log."""
        path = self.procs[(role, index)].log
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def metrics(self) -> dict[str, Any]:
        """The master's metrics.json."""
        data: dict[str, Any] = json.loads((self.workdir / "output" / "metrics.json").read_text())
        return data

    def trained_logs(self) -> list[Path]:
        """Every worker's trained-batch log."""
        return sorted((self.workdir / "trained").glob("*.jsonl"))

    def trained_lines(self) -> int:
        """How many batches all workers have logged so far."""
        n = 0
        for path in self.trained_logs():
            with open(path, "rb") as f:
                n += sum(1 for _ in f)
        return n

    def audit(self) -> Audit:
        """Record accounting over every worker's trained-batch log."""
        info = read_dataset_info(self.data)
        return audit(
            self.trained_logs(),
            epochs=self.epochs,
            train_shards=[s.records for s in info.shards("train")],
            generations=read_generations(self.workdir / "checkpoints", self.num_ps),
        )

    def close(self) -> None:
        """Kill whatever still runs, then stop the gate."""
        for p in self.procs.values():
            if p.popen is not None and p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait(timeout=30)
        if self.gate is not None:
            self.gate.close()
            self.gate = None

    def __enter__(self) -> LocalPSJob:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
