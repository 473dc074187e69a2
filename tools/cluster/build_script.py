"""Running one of the repository's build scripts (`tools/<piece>/build.sh`) from Python.

Each script builds its pieces into a cache keyed by their pins (nothing is rebuilt when the key
matches), prints the folder it built into as its last line of stdout, and, when a piece fails,
a line `<piece>: FAILED ...` that names it. With a `--print-*` flag it only prints where the
pieces would be, building nothing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


class BuildScriptError(Exception):
    """A build script ended non-zero; the message names the piece that failed where it said."""


def build(script: Path, log: Path | None = None, pieces: Sequence[str] = ()) -> Path:
    """Run `script` (for only `pieces` where it takes names), keeping its output in `log`; the
    folder it printed last."""
    done = subprocess.run(["bash", str(script), *pieces], capture_output=True, text=True, check=False)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        failed = [line for line in done.stdout.splitlines() if ": FAILED " in line]
        said = failed[-1] if failed else done.stdout[-2000:]
        raise BuildScriptError(f"{script} failed: {said}\n{done.stderr[-3000:]}")
    printed = done.stdout.strip().splitlines()
    if not printed:
        raise BuildScriptError(f"{script} succeeded but printed no folder: is it a build script of tools/?")
    return Path(printed[-1])


def printed_folder(script: Path, flag: str) -> Path | None:
    """Where `script` keeps its pieces (`script flag`, which builds nothing); None if it cannot say."""
    done = subprocess.run(["bash", str(script), flag], capture_output=True, text=True, check=False)
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None
