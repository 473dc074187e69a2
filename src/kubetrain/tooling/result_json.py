"""The one JSON object every `--json` command ends stdout with: one head for every command and every ending.

Head, always, in this order: `state` (what became of the command: `SUCCEEDED`, `FAILED`,
`CANCELLED`, or the command's own, `CHECKED` for `run --dry-run`, `SUBMITTED` for `submit`
without `--wait`), `exit_code` (the process's), `error` (one line, null on success), `error_type`
(the kubetrain error class when the command itself raised one, else null: a failed run's error is
its failed task's) and `warnings` (a list, maybe empty). Then the command's own keys, the same
whether it succeeded or failed, null (or empty) where the command did not get that far: an error
before the run has the run's keys too. docs/user-guide.md#what-a-run-leaves-behind lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubetrain.errors import ExitCode

HEAD = ("state", "exit_code", "error", "error_type", "warnings")


def result_json(
    *,
    state: str,
    exit_code: int,
    error: str | None = None,
    error_type: str | None = None,
    warnings: Iterable[str] = (),
    fields: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The head, then the command's own `fields` (which may not redefine the head)."""
    own = dict(fields or {})
    clash = sorted(set(own) & set(HEAD))
    if clash:
        raise ValueError(f"result_json: fields {clash} belong to the head")
    head = {"state": state, "exit_code": int(exit_code), "error": error, "error_type": error_type}
    return {**head, "warnings": list(warnings), **own}


def error_state(exit_code: int) -> str:
    """The state of a command an error ended: CANCELLED for a stop (exit 5), else FAILED."""
    return "CANCELLED" if exit_code == ExitCode.CANCELLED else "FAILED"
