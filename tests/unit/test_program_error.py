"""The user's program's own error, read from a failed job's log tails (issue 34)."""

from __future__ import annotations

from kubetrain.backends.base import PodInfo
from kubetrain.launcher.program_error import exception_line, program_error

TRACE = """epoch 1
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    main()
ValueError: no labels in shard 2
"""


def _pod(rtype: str, index: int) -> PodInfo:
    return PodInfo(name=f"j-{rtype.lower()}-{index}", replica_type=rtype, index=index, phase="Failed", container="c")


def test_the_last_traceback_line_is_the_error() -> None:
    assert exception_line(TRACE) == ("ValueError: no labels in shard 2", None)
    # A chained one: the last traceback's line wins.
    chained = (
        TRACE
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + TRACE.replace("ValueError: no labels in shard 2", "KeyError: 'y'")
    )
    assert exception_line(chained) == ("KeyError: 'y'", None)
    # The tail began inside the traceback: a line that names an exception still counts.
    assert exception_line("    main()\nRuntimeError: NCCL timeout\n") == ("RuntimeError: NCCL timeout", None)
    assert exception_line("epoch 1\nepoch 2 loss: 0.3\n") is None


def test_ranks_from_the_job_kind_and_from_open_mpi_tags() -> None:
    tails = [(_pod("Worker", 1), TRACE), (_pod("Master", 0), "killed by a peer\n")]
    assert program_error(tails, kind="PyTorchJob") == "rank 2: ValueError: no labels in shard 2"
    mpi = '[1,0]<stderr>:Traceback (most recent call last):\n[1,0]<stderr>:  File "x"\n[1,0]<stderr>:OSError: disk\n'
    assert program_error([(_pod("Launcher", 0), mpi)], kind="MPIJob") == "rank 1: OSError: disk"
    assert (
        program_error([(_pod("Launcher", 0), TRACE)], kind="MPIJob") == "launcher-0: ValueError: no labels in shard 2"
    )
    assert program_error([(_pod("Worker", 0), "oom\n")], kind="PyTorchJob") is None
