"""One SeaweedFS `weed server` on loopback for a test module, started as tools/cluster/kfp/object_store.py
starts it in the cluster, and stopped however it ends. Used by test_seaweedfs_store.py and
test_kfp_profile_hook.py, which check what KFP's clients and KFP's namespace hook do with it.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tools.cluster.kfp import http_probe, manifests, object_store

READY_S = 120  # a cold start on a loaded 2-core machine: master, volume, filer, then the S3 gateway


def free_port(taken: set[int], *, with_grpc: bool = False) -> int:
    """A free loopback port not in `taken` (added to it); with_grpc: its +10000 too, as weed's gRPC takes it."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port in taken or (with_grpc and (port + 10000 >= 65536 or port + 10000 in taken)):
            continue
        if with_grpc:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
        taken.add(port)
        return port


def free_ports(taken: set[int] | None = None) -> object_store.WeedPorts:
    """Ports for one weed: S3, master, volume and filer (each with its gRPC port) and the IAM API."""
    taken = set() if taken is None else taken
    s3, master, volume, filer = (free_port(taken, with_grpc=True) for _ in range(4))
    return object_store.WeedPorts(s3=s3, master=master, volume=volume, filer=filer, iam=free_port(taken))


@contextlib.contextmanager
def process(
    argv: Sequence[str], log: Path, ready: str, env: dict[str, str] | None = None, *, ok_only: bool = True
) -> Iterator[None]:
    """`argv` running in its own session, logging to `log`, until the block ends; yields once `ready`
    answers (200, or any status when not `ok_only`)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + READY_S
        while not http_probe.answers(ready, ok_only=ok_only):
            assert proc.poll() is None, f"{argv[0]} exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{ready} not answering after {READY_S}s:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=object_store.STOP_GRACE_S)  # weed never ends on SIGTERM (object_store says why)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def serving(run: Path, weed: Path, *extra: str) -> Iterator[object_store.WeedPorts]:
    """weed with object_store's argv (and `extra` flags) in `run`, on free ports, until the block ends."""
    ports = free_ports()
    argv = object_store.prepare_seaweedfs(run, weed, ip="127.0.0.1", ports=ports,
                                          access_key=manifests.S3_ACCESS_KEY, secret_key=manifests.S3_SECRET_KEY)  # fmt: skip
    with process([*argv, *extra], run / "weed.log", object_store.wait_ready_url("127.0.0.1", ports)):
        yield ports
