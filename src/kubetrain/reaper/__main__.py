"""`python -m kubetrain.reaper`: sweep one namespace's kubetrain jobs every few seconds until stopped.

Run it as deploy/reaper.yaml's Deployment (its ServiceAccount may list and delete the four job
kinds and get pods, nothing else), one per namespace where KFP steps launch jobs.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from kubetrain.backends.kubernetes import KubernetesBackend
from kubetrain.errors import BackendError, ExitCode, KubetrainError
from kubetrain.reaper.sweep import DEFAULT_GRACE_SECONDS, Reaper

logger = logging.getLogger("kubetrain.reaper")


def _interval(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"got {value!r}; expected a positive number of seconds, e.g. 5")
    return seconds


def _grace(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"got {value!r}; expected a number of seconds >= 0, e.g. 30")
    return seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The reaper's flags."""
    p = argparse.ArgumentParser(
        prog="python -m kubetrain.reaper",
        description="Delete kubetrain jobs whose KFP step pod has ended (terminated runs), by uid.",
    )
    p.add_argument("--namespace", help="the namespace to sweep (default: the pod's, or the kubeconfig context's)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--interval", type=_interval, default=5.0, help="seconds between sweeps (default 5)")
    p.add_argument("--grace-seconds", type=_grace, default=DEFAULT_GRACE_SECONDS,
                   help="seconds a step must have ended before its job is deleted, time for a retry of the "
                        f"step to adopt it (default {DEFAULT_GRACE_SECONDS:g})")  # fmt: skip
    p.add_argument("--once", action="store_true", help="one sweep, then exit")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Sweep until SIGTERM/SIGINT (or once); the exit code of kubetrain.errors.ExitCode."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, request_stop)
    try:
        backend = KubernetesBackend(namespace=args.namespace, kubeconfig=args.kubeconfig, context=args.context)
    except KubetrainError as e:
        print(f"kubetrain.reaper: {e}", file=sys.stderr)
        return int(e.exit_code)
    try:
        reaper = Reaper(backend, grace_seconds=args.grace_seconds)
        logger.info("sweeping namespace %s every %gs, grace %gs", reaper.steps.namespace, args.interval,
                    args.grace_seconds)  # fmt: skip
        swept = False
        while True:
            try:
                reaper.sweep()
                if not swept:
                    swept = True
                    logger.info("first sweep done")  # its Role let it list every kind and read pods
            except BackendError as e:
                if args.once:
                    print(f"kubetrain.reaper: {e}", file=sys.stderr)
                    return int(e.exit_code)
                logger.warning("sweep failed (tried again in %gs): %s", args.interval, e)
            if args.once or stop.wait(args.interval):
                return int(ExitCode.SUCCESS)
    finally:
        backend.close()


if __name__ == "__main__":
    sys.exit(main())
