"""The user's program's own error, read from a failed job's log tails.

A failed job's status names the job ("reached the specified backoff limit; …-worker-0 exited
with code 1"); what the user needs first is the program's exception. This one module reads it,
for every backend: the launcher hands it the failed pods' tails, read from the local backend's
log files or from the Kubernetes API alike.

Python ends a traceback with one unindented `Type: message` line (or `Type` alone). Other
processes' lines can be interleaved into it (mpirun relays every rank's output into one stream),
so a traceback's error is its last line that names an exception (`ValueError: ...`), else its
last `Type: message` line, before the blank line or the next traceback that ends it. A line that
torch.distributed prefixed with `[rank1]: ` or Open MPI tagged with `[1,0]<stderr>:` is rank 1's,
and tracebacks are followed per rank, so a rank's lines inside another's traceback do not count;
kubetrain's own trainers end a failed rank's log with `[rank 1] error: DivergedError: ...`.
Otherwise the replica is named by its rank where the kind fixes it (a PyTorchJob's master is
rank 0, worker i is rank i + 1) or by the rank ChainerMN's or Open MPI's abort report names, else
by its replica and index. A rank that exited without a traceback (`sys.exit(3)`) is named from what
Open MPI printed about it; a program file that is not there, from Python's `can't open file` line.

With several errors, the first rank whose error is not a communication error (`Connection closed
by peer`: it lost a peer that failed first) is the cause; only when every error is one, the lowest
rank's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kubetrain.backends.base import PodInfo

__all__ = ["exception_line", "exceptions", "is_communication_error", "mpi_exit_line", "program_error", "replica_label"]

_TRACEBACK = "Traceback (most recent call last):"
# Open MPI's --tag-output prefix, and torch.distributed's (its excepthook prefixes every line of an
# uncaught exception's report with `[rankN]: `).
_MPI_TAG = re.compile(r"^\[(?P<rank>\d+),\d+\]<std(?:out|err)>:\s?")
_TORCH_TAG = re.compile(r"^\[rank(?P<rank>\d+)\]:(?: |$)")
# kubetrain's trainers end a failed rank's log with `[rank 1] error: DivergedError: ...` (train.common.log).
_TRAINER_ERROR = re.compile(r"^\[rank (?P<rank>\d+)\] error: (?P<error>[A-Za-z_][\w.]*: .*)$")
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)(?::\s(?P<message>.*))?$")
# A type name that says it is an exception (or a dotted one, `chainer.utils.type_check.InvalidType`):
# inside a traceback it beats a `word: text` line that another process wrote into it.
_EXCEPTION_NAME = re.compile(r"(?:\.|(?:Error|Exception|Exit|Interrupt|Warning|Iteration|Group)$)")
# Without its traceback's header (cut off by the tail): only a name that says it is an exception.
_BARE_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)(?::\s.*)?$")
# Python's own words for a program file that is not there (`python: can't open file '/x.py': [Errno 2] ...`).
_CANNOT_OPEN = re.compile(r"^\S*?(?P<python>python[\d.]*): (?P<what>can't open file .*)$")
# What a rank says when it lost a peer that failed first: never the cause when another rank says more.
_COMMUNICATION = re.compile(
    r"Connection (?:closed|reset) by peer|Connection refused|Broken pipe|DistNetworkError|DistBackendError"
    r"|NCCL communicator was aborted|Timed out waiting \d+ms for (?:send|recv)|Application timeout caused pair closure"
    r"|MPI_ERR_PROC_FAILED"
)


@dataclass(frozen=True)
class FoundError:
    """One error found in a tail: its line, the rank a tag named (or None), and where it ended."""

    text: str
    rank: str | None
    line_no: int


@dataclass
class _Block:
    """A traceback being read: its best candidates so far."""

    strong: tuple[str, int] | None = None
    weak: tuple[str, int] | None = None

    def note(self, line: str, line_no: int) -> None:
        match = _EXCEPTION.match(line)
        if match is None:
            return
        if _EXCEPTION_NAME.search(match["type"]):
            self.strong = (line, line_no)
        else:
            self.weak = (line, line_no)

    def result(self, rank: str | None) -> FoundError | None:
        best = self.strong or self.weak
        return FoundError(best[0], rank, best[1]) if best is not None else None


def _untag(raw: str) -> tuple[str, str | None]:
    """The line without an Open MPI or torch.distributed rank tag, and the rank it named."""
    tag = _MPI_TAG.match(raw) or _TORCH_TAG.match(raw)
    if tag is None:
        return raw.rstrip(), None
    return raw[tag.end() :].rstrip(), tag.group("rank")


def exceptions(tail: str) -> list[FoundError]:
    """Every traceback's error in `tail`, in the order they ended; a tail without one gives what it has.

    A tail that starts inside a traceback has no header: then its last line that names an
    exception (`...Error: ...`) counts, or Python's `can't open file` line.
    """
    found: list[FoundError] = []
    open_blocks: dict[str | None, _Block] = {}  # per rank tag: the traceback being read
    bare: FoundError | None = None

    def close(rank: str | None) -> None:
        block = open_blocks.pop(rank, None)
        if block is not None and (result := block.result(rank)) is not None:
            found.append(result)

    for line_no, raw in enumerate(tail.splitlines()):
        line, rank = _untag(raw)
        if (said := _TRAINER_ERROR.match(line)) is not None:
            found.append(FoundError(said["error"], said["rank"], line_no))
            continue
        if line.strip() == _TRACEBACK:
            close(rank)
            open_blocks[rank] = _Block()
            continue
        if not line.strip():
            close(rank)  # a blank line ends a traceback (a chained one starts with its own header)
            continue
        if line[0].isspace():
            continue
        if (opened := _CANNOT_OPEN.match(line)) is not None:
            bare = FoundError(f"{opened['python']}: {opened['what']}", rank, line_no)
        elif _BARE_EXCEPTION.match(line):
            bare = FoundError(line, rank, line_no)
        if rank in open_blocks:  # a rank's traceback takes only that rank's lines
            open_blocks[rank].note(line, line_no)
    for rank in list(open_blocks):
        close(rank)
    if found:
        return sorted(found, key=lambda f: f.line_no)
    return [bare] if bare is not None else []


def exception_line(tail: str) -> tuple[str, str | None] | None:
    """(`Type: message`, rank from a tag or None) of the error that ends `tail`, or None.

    A rank's own (tagged) error comes before an untagged one that followed it (torchrun's
    `ChildFailedError` about that rank).
    """
    found = exceptions(tail)
    if not found:
        return None
    tagged = [f for f in found if f.rank is not None]
    last = (tagged or found)[-1]
    return last.text, last.rank


def is_communication_error(text: str) -> bool:
    """Whether an error line says only that a peer went away (the peer's own error is the cause)."""
    return _COMMUNICATION.search(text) is not None


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


def _abort_rank(tail: str, after_line: int) -> str | None:
    """The rank ChainerMN's abort switch named after line `after_line` (else anywhere), or Open MPI's MPI_ABORT."""
    rest = "\n".join(tail.splitlines()[after_line:])
    abort = _CHAINERMN_ABORT.search(rest) or _CHAINERMN_ABORT.search(tail) or _MPI_ABORT.search(tail)
    return abort["rank"] if abort is not None else None


def program_error(tails: Iterable[tuple[PodInfo, str]], *, kind: str) -> str | None:
    """`rank 1: RuntimeError: boom` from the failed replicas' tails, or None.

    The first rank whose error is not a communication error wins (a rank that lost its peer
    reports `Connection closed by peer`, whatever its rank); among equals the lowest rank.
    """
    pairs = list(tails)
    has_master = any(pod.replica_type.lower() == "master" for pod, _ in pairs)
    ranked: list[tuple[bool, int, str]] = []
    for pod, tail in pairs:
        # Each rank's last error (a chained traceback ends in the one that propagated); an untagged
        # one only when no rank is named (torchrun's report about a rank comes after the rank's own).
        last = {f.rank: f for f in exceptions(tail)}
        tagged = [f for rank, f in last.items() if rank is not None]
        for error in tagged or list(last.values()):
            rank = error.rank
            if rank is None:
                # Untagged output: the rank that raised is the one ChainerMN's abort switch (or
                # mpi4py's runner) made call MPI_Abort, which both name.
                rank = _abort_rank(tail, error.line_no)
            label = f"rank {rank}" if rank is not None else replica_label(pod, kind=kind, has_master=has_master)
            number = int(label.split()[1]) if label.startswith("rank ") else 1 << 20
            # Ties (replicas without a rank: a JobSet's master-0, worker-0) go by name, master before worker.
            ranked.append((is_communication_error(error.text), number, f"{label}: {error.text}"))
    if ranked:
        return min(ranked)[2]
    return next((said for _, tail in pairs if (said := mpi_exit_line(tail)) is not None), None)
