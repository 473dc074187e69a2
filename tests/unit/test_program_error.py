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


# What torch 2.13's gloo DDP printed here: rank 1's program raised, rank 0 lost its peer in a collective.
TORCH_RANK0 = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/tmp/fx/ddp_raise.py", line 10, in <module>
[rank0]:     dist.all_reduce(t)
[rank0]:   File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
[rank0]:     work.wait()
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed \
by peer [127.0.0.1]:54400. This is typically caused by a remote worker crashing. Check the logs of the remote worker \
before reporting an error. GLHF!
"""
TORCH_RANK1 = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/fx/ddp_raise.py", line 8, in <module>
[rank1]:     raise ValueError("no labels in shard 1")
[rank1]: ValueError: no labels in shard 1
terminate called without an active exception
"""
# torchrun's own report after a rank failed (elastic PyTorchJobs, Trainer's torch runtime).
TORCHRUN = """Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 31)
============================================================
"""  # noqa: W291 - torchrun writes the trailing space


def test_torch_distributed_rank_prefixes_name_the_rank_and_the_exception() -> None:
    """Issue 48 item 10: a DDP program's `[rank0]: RuntimeError: ...` was missing from the summary."""
    assert exception_line(TORCH_RANK1) == ("ValueError: no labels in shard 1", "1")
    # A TrainJob's node pod, where torch's prefix is all that names the rank.
    assert (
        program_error([(_pod("Node", 0), TORCH_RANK1)], kind="TrainJob") == "rank 1: ValueError: no labels in shard 1"
    )
    # Two local ranks in one pod under torchrun: the rank's own error, not torchrun's report about it.
    both = TORCH_RANK0.replace("Connection closed", "CUDA out of memory; connection closed") + TORCH_RANK1 + TORCHRUN
    assert program_error([(_pod("Node", 0), both)], kind="TrainJob") == (
        "rank 0: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] CUDA out of "
        "memory; connection closed by peer [127.0.0.1]:54400. This is typically caused by a remote worker crashing. "
        "Check the logs of the remote worker before reporting an error. GLHF!"
    )


def test_a_rank_that_lost_its_peer_is_not_the_cause() -> None:
    """Issue 49 item 2: with every rank failed, rank 0's `Connection closed by peer` hid rank 1's real error."""
    tails = [(_pod("Master", 0), TORCH_RANK0), (_pod("Worker", 0), TORCH_RANK1)]
    assert program_error(tails, kind="PyTorchJob") == "rank 1: ValueError: no labels in shard 1"
    # Only communication errors: the lowest rank's.
    lowest = program_error([(_pod("Master", 0), TORCH_RANK0)], kind="PyTorchJob")
    assert lowest is not None and lowest.startswith("rank 0: RuntimeError: [/__w/pytorch")


# Rank 1's ChainerMN traceback as mpirun relayed it (no --tag-output): rank 0's progress lines fell into it.
CHAINERMN_INTERLEAVED = """Traceback (most recent call last):
  File "/work/train.py", line 40, in <module>
epoch: 0 acc: 0.91
    main()
  File "/work/train.py", line 31, in main
    trainer.run()
  File "/venv/lib/python3.11/site-packages/chainer/training/trainer.py", line 376, in run
    six.reraise(*exc_info)
  File "/venv/lib/python3.11/site-packages/chainer/training/trainer.py", line 343, in run
    update()
main/loss: 0.3021
  File "/work/train.py", line 22, in forward
    raise ValueError("labels out of range in shard 1")
ValueError: labels out of range in shard 1
epoch: 1 acc: 0.93

******************************************
ChainerMN:
   Uncaught exception on rank 1.
   Calling MPI_Abort() to shut down MPI...
******************************************
"""


def test_lines_interleaved_into_a_traceback_are_not_its_error() -> None:
    """Issue 49 item 4: the error read rank 0's progress line, interleaved into rank 1's traceback."""
    assert (
        program_error([(_pod("Launcher", 0), CHAINERMN_INTERLEAVED)], kind="MPIJob")
        == "rank 1: ValueError: labels out of range in shard 1"
    )
    # An exception whose name does not say so is still the last `Type: message` line of its traceback.
    custom = 'Traceback (most recent call last):\n  File "t.py"\nstep: 3\n    boom()\nBoom: shard 2\n'
    assert exception_line(custom) == ("Boom: shard 2", None)


def test_a_missing_program_file_is_the_error() -> None:
    """Issue 49 item 7: `can't open file` was only in the log tails."""
    tail = "/opt/venv/bin/python3: can't open file '/workspace/train.py': [Errno 2] No such file or directory\n"
    assert program_error([(_pod("Master", 0), tail)], kind="PyTorchJob") == (
        "rank 0: python3: can't open file '/workspace/train.py': [Errno 2] No such file or directory"
    )


def test_kubetrains_trainers_error_line_names_its_rank() -> None:
    """Issue 49 item 3: a diverged ChainerMN run fails with one line, like the PS runtime's."""
    line = "DivergedError: the model diverged at step 2 (epoch 0): the training loss (averaged over the ranks) is nan"
    tail = f"[rank 1] epoch 0: loss nan\n[rank 1] error: {line}\n[rank 0] error: {line}\n" + MPI_ABORT
    assert program_error([(_pod("Launcher", 0), tail)], kind="MPIJob") == f"rank 0: {line}"


def test_a_ranks_chained_traceback_ends_in_the_error_that_propagated() -> None:
    chained = TORCH_RANK1 + "\n[rank1]: During handling of the above exception, another exception occurred:\n\n"
    chained += TORCH_RANK1.replace("ValueError: no labels in shard 1", "KeyError: 'y'")
    assert program_error([(_pod("Worker", 0), chained)], kind="PyTorchJob") == "rank 1: KeyError: 'y'"


def test_replicas_without_a_rank_go_by_name() -> None:
    """The PS JobSet: the master's error comes before a worker's, whichever pod failed first."""
    tails = [(_pod("Worker", 0), TRACE), (_pod("Master", 0), "JobAbortedError: the model diverged: nan\n")]
    assert program_error(tails, kind="JobSet") == "master-0: JobAbortedError: the model diverged: nan"
