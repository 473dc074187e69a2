"""The per-job token that the master shows the parameter servers for Shutdown and Flush.

Any pod that can reach a shard's port could otherwise stop it. The token is not in the manifest
(any reader of the JobSet would see it) but drawn at random by the first of the job's processes
to start and kept in a file on the job's own volume (next to the master's state), mode 0600:
only pods that mount that claim can read it, and those can already change the checkpoints.
The master sends it as call metadata; a shard compares it in constant time.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path

import grpc

from kubetrain.ps.common.errors import CheckpointError

__all__ = ["TOKEN_METADATA", "check_token", "ensure_token", "token_metadata"]

TOKEN_METADATA = "kubetrain-job-token"


def ensure_token(path: Path) -> str:
    """The job's token at `path`, drawn and written there first if there is none (first one wins)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            try:
                os.link(tmp, path)  # atomic and never overwrites: a racing process's token wins
            except FileExistsError:
                pass
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        token = path.read_text().strip()
    except OSError as e:
        raise CheckpointError(f"job token {path}: {e.strerror or e}") from e
    if len(token) < 32:
        raise CheckpointError(f"job token {path}: holds {len(token)} characters; expected a random token (delete it)")
    return token


def token_metadata(token: str) -> tuple[tuple[str, str]]:
    """The call metadata carrying `token`."""
    return ((TOKEN_METADATA, token),)


def check_token(context: grpc.ServicerContext, token: str, what: str) -> None:
    """Abort the call with PERMISSION_DENIED unless it carries the job's token."""
    given = dict(context.invocation_metadata()).get(TOKEN_METADATA, "")
    if not (isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())):
        context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{what}: only the job's master may call it (job token)")
