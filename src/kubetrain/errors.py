"""The kubetrain error hierarchy and the launcher's exit codes.

Every error a user can see derives from :class:`KubetrainError` and carries the exit code the CLI
returns for it, so `kubetrain launch` and the KFP components map failures the same way.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Distinct exit codes of `kubetrain launch` and of every launcher component."""

    SUCCESS = 0
    JOB_FAILED = 1  # the training job ran and ended Failed
    INVALID_INPUT = 2  # bad spec, flag or manifest: nothing was submitted
    TIMEOUT = 3  # the overall timeout passed; the job was deleted or suspended
    INFRASTRUCTURE = 4  # API server / backend errors that persisted after retries
    CANCELLED = 5  # SIGTERM/SIGINT/SIGHUP (the KFP run was cancelled); the job was deleted


class KubetrainError(Exception):
    """Base class of every error kubetrain raises on purpose."""

    exit_code: ExitCode = ExitCode.JOB_FAILED


class InvalidInputError(KubetrainError, ValueError):
    """Input that can never work: raised before anything is submitted."""

    exit_code = ExitCode.INVALID_INPUT


class SpecError(InvalidInputError):
    """A spec field with a bad value. The message names the field, the value and what is expected."""

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{field}: got {value!r}; expected {expected}")


class ManifestError(InvalidInputError):
    """A job manifest (rendered or user-supplied) that the API server or operator would reject."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class DataError(KubetrainError):
    """A data set that cannot be fetched, verified or read."""

    exit_code = ExitCode.INVALID_INPUT


class BackendError(KubetrainError):
    """The backend (Kubernetes API or the local runner) failed after its retries."""

    exit_code = ExitCode.INFRASTRUCTURE


class JobConflictError(BackendError):
    """A job of that name exists and does not belong to this run and task."""

    exit_code = ExitCode.INVALID_INPUT


class JobFailedError(KubetrainError):
    """The training job ended Failed. Carries the reason, message and failed replicas' log tails.

    `program_error`: the user's program's own last exception line, with its rank, when a tail has
    one (`rank 1: RuntimeError: boom`); `shown`: the launcher already printed the whole message,
    tails included, to its log, so a caller prints :meth:`headline` rather than all of it again.
    """

    exit_code = ExitCode.JOB_FAILED

    def __init__(
        self,
        message: str,
        *,
        reason: str = "",
        log_tails: dict[str, str] | None = None,
        program_error: str | None = None,
        shown: bool = False,
    ):
        self.reason = reason
        self.log_tails = dict(log_tails or {})
        self.program_error = program_error
        self.shown = shown
        super().__init__(message)

    def headline(self) -> str:
        """One line: the program's error first when known, then why the job failed."""
        lines = str(self).strip().splitlines()
        first = lines[0] if lines else "the job failed"
        return f"{self.program_error}; {first}" if self.program_error else first


class JobTimeoutError(KubetrainError, TimeoutError):
    """The overall timeout passed before the job finished."""

    exit_code = ExitCode.TIMEOUT


class JobCancelledError(KubetrainError):
    """The launcher was told to stop (SIGTERM/SIGINT) and cleaned the job up."""

    exit_code = ExitCode.CANCELLED


class TrainingError(KubetrainError):
    """A training program hit an unrecoverable problem (dead peer, corrupt checkpoint, ...)."""


# What every divergence error ends with, whichever runtime found it.
DIVERGED_ADVICE = "lower the learning rate (or check the data for non-finite values)"


class DivergedError(TrainingError):
    """A loss or a parameter is not finite: the model diverged, training on cannot help."""
