"""Command-line plumbing shared by the three PS entry points: env defaults, logging, signals, main()."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Sequence

from kubetrain.errors import KubetrainError
from kubetrain.ps.common.errors import PSConfigError

__all__ = [
    "BIND_ENV",
    "default_bind",
    "env_int",
    "incarnation_default",
    "process_main",
    "setup_logging",
    "stop_on_signals",
    "worker_id_default",
]

# The local backend gives each replica its own loopback address and keeps the manifest's ports,
# so several replicas can share one port number: each must listen on its own address only.
BIND_ENV = "KUBETRAIN_BIND_ADDRESS"


def default_bind() -> str:
    """The address to listen on: $KUBETRAIN_BIND_ADDRESS, else every interface."""
    return os.environ.get(BIND_ENV) or "0.0.0.0"


def env_int(names: Sequence[str]) -> int | None:
    """The first of the environment variables `names` that is set, as an int (None if none)."""
    for name in names:
        raw = os.environ.get(name)
        if raw is None or raw == "":
            continue
        try:
            return int(raw)
        except ValueError:
            raise PSConfigError(f"${name}: got {raw!r}; expected an integer") from None
    return None


def incarnation_default() -> str:
    """A new process's incarnation: `<pod uid>/<random>` where the pod tells its UID
    ($KUBETRAIN_POD_UID), so the master can refuse every process of a pod it knows was preempted;
    else random."""
    fresh = uuid.uuid4().hex
    pod = os.environ.get("KUBETRAIN_POD_UID", "")
    return f"{pod}/{fresh}" if pod else fresh


def worker_id_default() -> str:
    """A worker id: $KUBETRAIN_WORKER_ID, else the pod host name (+ completion index)."""
    explicit = os.environ.get("KUBETRAIN_WORKER_ID")
    if explicit:
        return explicit
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    index = os.environ.get("JOB_COMPLETION_INDEX")
    # Indexed-Job pod host names already end in the index; locally all replicas share one
    # host name, so the index is what tells them apart.
    if index is not None and not host.endswith(f"-{index}"):
        return f"{host}-{index}"
    return host


def setup_logging(role: str, level: str) -> None:
    """Log lines on stderr prefixed with the role and pid."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s {role}[%(process)d] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM/SIGINT set `stop` (the pod is being deleted: finish cleanly, exit)."""

    def handler(signum: int, frame: object) -> None:
        del frame
        logging.getLogger(__name__).info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def process_main(
    role: str,
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None,
    *,
    log: logging.Logger,
) -> int:
    """A PS process's `main()`: parse `argv`, log as `role`, run; returns `run`'s exit code.

    A KubetrainError ends the process with its own exit code (2 for a flag that can never work),
    logged on `log`, the process's logger, as its last line.
    """
    args = parser.parse_args(argv)
    setup_logging(role, args.log_level)
    try:
        return run(args)
    except KubetrainError as e:
        log.error("%s", e)
        return int(e.exit_code)
