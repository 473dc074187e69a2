"""The user's program's own error, read from a failed job's log tails.

A failed job's status names the job ("reached the specified backoff limit; …-worker-0 exited
with code 1"); what the user needs first is the program's exception. Python ends a traceback with
one unindented `Type: message` line (or `Type` alone); the last such line after the last
`Traceback (most recent call last):` of a replica's tail is its error. The replica is named by
its rank where the kind fixes it (a PyTorchJob's master is rank 0, worker i is rank i + 1; a
line Open MPI tagged `[1,0]<stderr>:` is rank 1), else by its replica and index. A rank that
exited without a traceback (`sys.exit(3)`) is named from what Open MPI printed about it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kubetrain.backends.base import PodInfo

__all__ = ["exception_line", "mpi_exit_line", "program_error", "replica_label"]

_TRACEBACK = "Traceback (most recent call last):"
# Open MPI's --tag-output prefix and a timestamp the launcher's sink may have added.
_MPI_TAG = re.compile(r"^\[(?P<rank>\d+),\d+\]<std(?:out|err)>:\s?")
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)(?::\s(?P<message>.*))?$")
# Without its traceback's header (cut off by the tail): only a name that says it is an exception.
_BARE_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)(?::\s.*)?$")


def exception_line(tail: str) -> tuple[str, str | None] | None:
    """(`Type: message`, rank from an MPI tag or None) of the last traceback in `tail`, or None.

    A tail that starts inside a traceback has no header: then its last line that names an
    exception (`...Error: ...`) counts.
    """
    found: tuple[str, str | None] | None = None
    bare: tuple[str, str | None] | None = None
    in_traceback = False
    for raw in tail.splitlines():
        tag = _MPI_TAG.match(raw)
        line = (raw[tag.end() :] if tag else raw).rstrip()
        rank = tag.group("rank") if tag else None
        if line.strip() == _TRACEBACK:
            in_traceback = True
            continue
        if not line or line[0].isspace():
            continue
        if _BARE_EXCEPTION.match(line):
            bare = (line, rank)
        if in_traceback:
            in_traceback = False
            if _EXCEPTION.match(line):
                found = (line, rank)
    return found or bare


# Open MPI's words for a rank that aborted (mpi4py's runner aborts on a non-zero exit) or exited.
_MPI_ABORT = re.compile(
    r"MPI_ABORT was invoked on rank (?P<rank>\d+) in communicator \S+\s+with errorcode (?P<code>-?\d+)"
)
_CHAINERMN_ABORT = re.compile(r"Uncaught exception on rank (?P<rank>\d+)\.")
_MPI_EXIT = re.compile(r"Process name: \[\[\d+,\d+\],(?P<rank>\d+)\]\s+Exit code:\s+(?P<code>-?\d+)")


def mpi_exit_line(tail: str) -> str | None:
    """`rank 1: exited with code 3 (MPI_ABORT)` from Open MPI's report in `tail`, or None."""
    if (abort := _MPI_ABORT.search(tail)) is not None:
        return f"rank {abort['rank']}: exited with code {abort['code']} (MPI_ABORT)"
    if (exited := _MPI_EXIT.search(tail)) is not None:
        return f"rank {exited['rank']}: exited with code {exited['code']}"
    return None


def replica_label(pod: PodInfo, *, kind: str, has_master: bool) -> str:
    """`rank N` where the job kind fixes a pod's rank, else `replica-index` (lower case)."""
    rtype = pod.replica_type.lower()
    if kind == "PyTorchJob" and has_master:
        if rtype == "master":
            return "rank 0"
        if rtype == "worker":
            return f"rank {pod.index + 1}"
    return f"{rtype}-{pod.index}"


def program_error(tails: Iterable[tuple[PodInfo, str]], *, kind: str) -> str | None:
    """`rank 1: RuntimeError: boom` from the first failed replica whose tail ends in a traceback, or None.

    The lowest rank comes first: with an error on every rank, rank 0's is as good as any, and a
    rank that failed because a peer died (a connection reset) usually has the higher rank.
    """
    pairs = list(tails)
    has_master = any(pod.replica_type.lower() == "master" for pod, _ in pairs)
    found: list[tuple[int, str]] = []
    for pod, tail in pairs:
        line = exception_line(tail)
        if line is None:
            continue
        text, mpi_rank = line
        if mpi_rank is None and (abort := _CHAINERMN_ABORT.search(tail) or _MPI_ABORT.search(tail)) is not None:
            # Untagged output: the rank that raised is the one ChainerMN's abort switch (or
            # mpi4py's runner) made call MPI_Abort, which both name.
            mpi_rank = abort["rank"]
        label = f"rank {mpi_rank}" if mpi_rank is not None else replica_label(pod, kind=kind, has_master=has_master)
        rank = int(label.split()[1]) if label.startswith("rank ") else 1 << 20
        found.append((rank, f"{label}: {text}"))
    if found:
        return min(found)[1]
    return next((said for _, tail in pairs if (said := mpi_exit_line(tail)) is not None), None)
