"""Errors of the parameter-server runtime, all under :class:`kubetrain.errors.KubetrainError`."""

from __future__ import annotations

from kubetrain.errors import InvalidInputError, TrainingError

__all__ = [
    "CheckpointError",
    "JobAbortedError",
    "PSCallError",
    "PSConfigError",
    "PSUnavailableError",
    "StaleStateError",
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
