"""Run a command and start it again whenever it exits, as a Deployment's pod is restarted.

`python -m tools.cluster.keepalive CMD ARGS...`. An operator process exits when it loses its
leader-election lease (mpi-operator always elects a leader) or its API server stalls; on a cluster
the kubelet restarts it, and so does this. SIGTERM ends the command and then this process; the
e2e harness stops the whole process group.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

RESTART_DELAY_SECONDS = (1.0, 2.0, 5.0, 10.0)  # the kubelet's back-off, shortened


def main(argv: list[str]) -> int:
    """Keep `argv` running until SIGTERM/SIGINT."""
    stop = threading.Event()
    child: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        if child and child[-1].poll() is None:
            child[-1].send_signal(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    restarts = 0
    while not stop.is_set():
        started = time.monotonic()
        child.append(subprocess.Popen(argv))
        code = child[-1].wait()
        if stop.is_set():
            break
        restarts = 0 if time.monotonic() - started > 60 else restarts + 1
        delay = RESTART_DELAY_SECONDS[min(restarts, len(RESTART_DELAY_SECONDS) - 1)]
        print(f"keepalive: {argv[0]} exited {code}; restarting in {delay:g}s", file=sys.stderr, flush=True)
        stop.wait(delay)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
