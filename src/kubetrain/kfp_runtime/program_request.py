"""The requests that run a program on an operator's job or a TrainJob: PyTorch and ChainerMN alike.

Both take the program the same way (kubetrain's trainer, a shell-quoted replacement of it, or the
user's own program as lists) and the job API the same way (their operator's job, or a Kubeflow
Trainer v2 TrainJob on a named runtime); :class:`ProgramRequest` holds that once, and each
framework says only how its two specs are built.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import ClassVar

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.request_base import TrainingRequest, check_choice
from kubetrain.names import is_dns1123_subdomain
from kubetrain.presets import Program, UserProgram

TRAINJOB = "trainjob"


def parse_command(command: str) -> tuple[str, ...]:
    """A command override as a shell-quoted string; empty means the default program."""
    try:
        return tuple(shlex.split(command))
    except ValueError as e:
        raise InvalidInputError(f"command: got {command!r}; expected a shell-quoted command line ({e})") from e


def _strings(name: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidInputError(f"{name}: got {value!r}; expected a list of strings, e.g. ['python', 'train.py']")
    return tuple(value)


def choose_program(command: object, args: object, default: tuple[str, ...]) -> Program:
    """The program a request runs, checked.

    - `command` a list: the user's own program, run as given with `args` (no kubetrain flags);
    - `command` a string (the library's older form): a shell-quoted replacement of kubetrain's
      program, which still gets kubetrain's flags;
    - `command` empty: kubetrain's own trainer.
    """
    extra = _strings("args", args) if args is not None else ()
    if isinstance(command, str):
        if extra:
            raise InvalidInputError("args: given with a string command; pass command as a list to run your own program")
        return parse_command(command) or default
    program = _strings("command", command) if command is not None else ()
    if not program:
        if extra:
            raise InvalidInputError(
                f"args: got {list(extra)!r} without a command; set command (a list) to run your own program"
            )
        return default
    if not all(program):
        raise InvalidInputError(f"command: got {list(program)!r}; expected non-empty strings")
    return UserProgram(command=program, args=extra)


@dataclass(frozen=True, kw_only=True)
class ProgramRequest(TrainingRequest):
    """A request whose job runs one program, on the framework's operator job or on a TrainJob."""

    default_program: ClassVar[tuple[str, ...]]
    operator_api: ClassVar[str]  # the job_api of the framework's own operator: pytorchjob, mpijob

    command: list[str] | str | None = None
    args: list[str] | None = None
    job_api: str = ""
    runtime: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _ = self.program  # refused now, before anything is submitted
        check_choice("job_api", self.job_api, (self.operator_api, TRAINJOB))
        if self.runtime and self.job_api != TRAINJOB:
            raise InvalidInputError(
                f"runtime: got {self.runtime!r}; a training runtime is only used with job_api=trainjob"
            )
        if self.runtime and not is_dns1123_subdomain(self.runtime):
            raise InvalidInputError(f"runtime: got {self.runtime!r}; expected the name of a ClusterTrainingRuntime")
        if self.priority_class and self.job_api == TRAINJOB:
            # Trainer v2.3 lets no runtime patch set priorityClassName: refused, not dropped.
            raise InvalidInputError(
                f"priority_class: got {self.priority_class!r}; a TrainJob has no place for a pod priority class "
                "(Trainer v2.3's runtime patches cannot set it): set priorityClassName in the training runtime's "
                f"pod template, use job_api={self.operator_api}, or leave priority_class empty"
            )

    @property
    def program(self) -> Program:
        """kubetrain's trainer, or the program `command` names."""
        return choose_program(self.command, self.args, self.default_program)

    @property
    def user_program(self) -> UserProgram | None:
        """The user's own program, when `command` is a list."""
        program = self.program
        return program if isinstance(program, UserProgram) else None
