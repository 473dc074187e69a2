"""Errors of the parameter-server runtime, all under :class:`kubetrain.errors.KubetrainError`.

`DivergedError` is kubetrain's own (`kubetrain.errors`): the DDP and ChainerMN trainers raise it too.
"""

from __future__ import annotations

from kubetrain.errors import DivergedError, ExitCode, InvalidInputError, KubetrainError, TrainingError

__all__ = [
    "CheckpointError",
    "DivergedError",
    "JobAbortedError",
    "JobEndedError",
    "PSCallError",
    "PSConfigError",
    "PSUnavailableError",
    "StaleStateError",
    "UnknownTaskError",
]


class PSConfigError(InvalidInputError):
    """A flag or setting of a PS process that can never work (bad address, shard index, ...)."""


class PSUnavailableError(TrainingError):
    """A peer (master or parameter server) stayed unreachable past the retry deadline."""


class PSCallError(TrainingError):
    """A peer answered a call with an error that retrying cannot fix (bad request, server bug)."""


class CheckpointError(TrainingError):
    """A checkpoint or state file that cannot be written or read."""


class StaleStateError(TrainingError):
    """Another master with a newer generation owns the state file: this one must stop."""


class JobAbortedError(TrainingError):
    """The job failed on purpose: dropped work passed the threshold, or the master said so."""


class JobEndedError(KubetrainError):
    """The job had already ended (the master's recorded outcome) while this process waited for a peer.

    The worker exits 0 either way, as a server told to shut down does: its part ended with the job.
    The job's verdict is the master's, whose Job failing fails the JobSet at once (a failure rule);
    a worker exiting non-zero would be restarted into the same recorded end, and its Job's
    failure would restart the whole set (manifests.jobset).
    """

    exit_code = ExitCode.SUCCESS

    def __init__(self, message: str, *, failed: bool) -> None:
        super().__init__(message)
        self.failed = failed


class UnknownTaskError(InvalidInputError):
    """A report names a task this job never had (the master answers NOT_FOUND)."""
