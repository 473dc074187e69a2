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


MPI_ABORT = """rank 1 on stderr
--------------------------------------------------------------------------
MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD
with errorcode 3.

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
--------------------------------------------------------------------------
rank 0 stdout without a newline
"""
MPIRUN_EXIT = """--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[22035,1],1]
  Exit code:    3
--------------------------------------------------------------------------
"""


def test_a_rank_that_exited_without_a_traceback_is_named_from_open_mpis_words() -> None:
    """Issue 34 item 3: `sys.exit(3)` on rank 1 (no traceback) left the summary naming only the launcher's exit code."""
    launcher = _pod("Launcher", 0)
    assert program_error([(launcher, MPI_ABORT)], kind="MPIJob") == "rank 1: exited with code 3 (MPI_ABORT)"
    assert program_error([(launcher, MPIRUN_EXIT)], kind="MPIJob") == "rank 1: exited with code 3"
    # A traceback says more than the exit that followed it.
    trace = "[1,1]<stderr>:Traceback (most recent call last):\n[1,1]<stderr>:OSError: disk\n" + MPI_ABORT
    assert program_error([(launcher, trace)], kind="MPIJob") == "rank 1: OSError: disk"


def test_an_untagged_traceback_takes_its_rank_from_the_mpi_abort_that_followed() -> None:
    """Issue 34 item 3: a ChainerMN rank's exception was 'launcher-0: ValueError: ...' (Open MPI tags no lines)."""
    tail = TRACE.replace("ValueError: no labels in shard 2", "ValueError: no labels in shard 1") + MPI_ABORT
    assert program_error([(_pod("Launcher", 0), tail)], kind="MPIJob") == "rank 1: ValueError: no labels in shard 1"
    # ChainerMN's abort switch says which rank it was, even when Open MPI's own report is lost.
    chainermn = TRACE + "ChainerMN:\n   Uncaught exception on rank 2.\n   Calling MPI_Abort() to shut down MPI...\n"
    assert (
        program_error([(_pod("Launcher", 0), chainermn)], kind="MPIJob") == "rank 2: ValueError: no labels in shard 2"
    )
