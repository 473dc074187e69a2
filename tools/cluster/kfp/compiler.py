"""The KFP backend's own pipeline compiler (`backend/src/v2/cmd/compiler`): pipeline spec YAML -> Argo Workflow.

The API server compiles every uploaded pipeline with the same Go code when a run is created; this
command runs it without a server, so `make test` can check every committed YAML against the real
backend's compiler whenever the binary is in the cache (`make e2e` always builds it).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tools.cluster import build_script

REPO_ROOT = Path(__file__).resolve().parents[3]
TOOLS = REPO_ROOT / "tools" / "kfp"


class CompileError(RuntimeError):
    """The backend's compiler refused a pipeline; the message is its own."""


def cached_binary() -> Path | None:
    """The compiler built for the current pins, or None when it is not in the cache."""
    done = subprocess.run(["bash", str(TOOLS / "build.sh"), "--print-bin"], capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    binary = Path(done.stdout.strip()) / "kfp-compiler"
    return binary if binary.is_file() else None


def build() -> Path:
    """The compiler, built first if missing (only it: about two minutes with a warm module cache)."""
    try:
        return build_script.build(TOOLS / "build.sh", pieces=("compiler",)) / "kfp-compiler"
    except build_script.BuildScriptError as e:
        raise CompileError(str(e)) from e


def compile_workflow(binary: Path, package: Path) -> dict[str, Any]:
    """The Argo Workflow the backend makes of `package`; CompileError with the compiler's message."""
    done = subprocess.run([str(binary), "--spec", str(package)], capture_output=True, text=True, check=False,
                          timeout=120)  # fmt: skip
    if done.returncode != 0:
        raise CompileError(f"{package.name}: {done.stderr.strip()[-2000:]}")
    workflow: dict[str, Any] = yaml.safe_load(done.stdout)
    return workflow
