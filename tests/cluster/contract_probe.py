"""The probe that stands in for a training program: it prints what the program would see, then waits.

Run as `python -c <this file's text>` in place of a training container's command (any image with
Python, no file to mount), on the local backend and in real pods alike. It prints one line,
`KUBETRAIN-PROBE {json}`: the environment, the arguments, the working directory, the user and its
groups, the MPI hostfile (launchers), which of the host names the job gave it resolve, and which
of its `host:port` endpoints accept a connection. So that a peer's endpoint can answer, the probe
first listens on every endpoint port it was given (on `KUBETRAIN_BIND_ADDRESS` where the job sets
one, as the programs do), and keeps listening until SIGTERM.
"""

import json
import os
import re
import signal
import socket
import sys
import time

MARK = "KUBETRAIN-PROBE "
# Variables that are not the job's own endpoints: the API server, proxies, and the kubelet's
# service links (`<SVC>_PORT=tcp://…`), whose addresses are cluster IPs of the job's Services.
NOT_ENDPOINTS = re.compile(r"^KUBERNETES_|PROXY|proxy|_SERVICE_(HOST|PORT)|_PORT(_\d+_(TCP|UDP|SCTP)\w*)?$")
# `host:port` starting a token (not the host of a URL: `://host:port` is left alone).
ENDPOINT = re.compile(r"(?<![\w./:-])([A-Za-z0-9][\w.-]*):(\d{2,5})\b")
PAIRS = (("MASTER_ADDR", "MASTER_PORT"), ("PET_MASTER_ADDR", "PET_MASTER_PORT"))
WAIT_S = 120.0


def endpoints() -> set[tuple[str, int]]:
    """The `host:port` pairs in the job's variables and the arguments, and each ADDR/PORT pair."""
    texts = [v for k, v in os.environ.items() if not NOT_ENDPOINTS.search(k)] + sys.argv[1:]
    found = {(host, int(port)) for host, port in ENDPOINT.findall(" ".join(texts))}
    for addr, port in PAIRS:
        if os.environ.get(addr) and os.environ.get(port, "").isdigit():
            found.add((os.environ[addr], int(os.environ[port])))
    return found


def listen(ports: set[int]) -> list[socket.socket]:
    """Listen on each port where the job's programs would (a port that cannot be bound is skipped)."""
    sockets = []
    for port in sorted(ports):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((os.environ.get("KUBETRAIN_BIND_ADDRESS", ""), port))
            sock.listen(64)
        except OSError:
            sock.close()
            continue
        sockets.append(sock)
    return sockets


def resolves(host: str) -> bool:
    """Whether the name resolves to an address."""
    try:
        return bool(socket.getaddrinfo(host, None))
    except OSError:
        return False


def answers(host: str, port: int) -> bool:
    """Whether a TCP connection to host:port is accepted."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def main() -> None:
    """Print the view, then wait for SIGTERM (peers may still be connecting)."""
    # Blocked from the start: a container's PID 1 is never sent a signal it has no handler for,
    # and a SIGTERM that comes while the probe waits on its peers must still end it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    view: dict[str, object] = {
        "env": dict(os.environ),
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "user": {"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups())},
    }
    hosts: set[str] = set()
    path = os.environ.get("OMPI_MCA_orte_default_hostfile")  # noqa: SIM112 (Open MPI's name)
    if path and os.path.isfile(path):
        with open(path) as f:
            view["hostfile"] = f.read()
        hosts |= {line.split()[0] for line in str(view["hostfile"]).splitlines() if line.strip()}
    ends = endpoints()
    hosts |= {host for host, _ in ends}
    kept = listen({port for _, port in ends})
    # Peers start in any order and their DNS records appear as their pods do: retry until a deadline.
    resolved: set[str] = set()
    answered: set[tuple[str, int]] = set()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        resolved |= {h for h in hosts - resolved if resolves(h)}
        answered |= {e for e in ends - answered if answers(*e)}
        if resolved == hosts and answered == ends:
            break
        time.sleep(0.5)
    view["resolves"] = {h: h in resolved for h in sorted(hosts)}
    view["answers"] = {f"{h}:{p}": (h, p) in answered for h, p in sorted(ends)}
    print(MARK + json.dumps(view), flush=True)
    signal.sigwait({signal.SIGTERM})
    for sock in kept:
        sock.close()


if __name__ == "__main__":
    main()
