"""The virtualenv the KFP backend's Python services run in: the MLMD gRPC server and moto's S3 server.

ml-metadata 1.17.1 needs protobuf<5 and ships a cp311 wheel only, where the project venv has
protobuf 6, so the services get a venv of their own, installed from the complete pin set in
tools/kfp/services-requirements.txt and cached under
`$XDG_CACHE_HOME/kubetrain/kfp-services/<first 16 hex of the file's sha256>/venv` (~/.cache by
default): a changed pin builds a new venv beside the old one. A venv is not relocatable (its
scripts' shebangs name its own path), so it is built in a fresh `venv-*` directory that stays where
it is, and `venv` is a symlink swapped in atomically once the build and `pip check` passed: a build
killed half-way leaves no `venv`, and the next `ensure` removes its leftovers.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.cluster.file_lock import locked

REPO_ROOT = Path(__file__).resolve().parents[3]
REQUIREMENTS = REPO_ROOT / "tools" / "kfp" / "services-requirements.txt"
PYTHON_VERSION = (3, 11)  # ml-metadata 1.17.1 has cp311 wheels only
INSTALL_TIMEOUT_S = 1800  # a cold install downloads about 60 MB; pip itself retries slow reads
STEP_TIMEOUT_S = 300
# Settings that would put the caller's packages (the project's protobuf 6) in front of the venv's.
_LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "PIP_USER")


class ServicesVenvError(RuntimeError):
    """The services venv could not be built; the message names the command and the tail of its output."""


def cache_root() -> Path:
    """Where services venvs live: `$XDG_CACHE_HOME/kubetrain/kfp-services` (~/.cache by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kubetrain" / "kfp-services"


def venv_dir(requirements: Path = REQUIREMENTS) -> Path:
    """The venv's path for this pin set, whether built or not."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    return cache_root() / digest / "venv"


def python(venv: Path) -> Path:
    """The venv's interpreter (run mlmd_server.py with it)."""
    return venv / "bin" / "python"


def moto_server(venv: Path) -> Path:
    """moto's S3 server: `moto_server -H HOST -p PORT`."""
    return venv / "bin" / "moto_server"


def environment() -> dict[str, str]:
    """The caller's environment without the Python settings that would mix its packages into the venv's."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def ensure(log: Path | None = None, *, requirements: Path = REQUIREMENTS) -> Path:
    """Return the services venv's directory, building it first if it is missing (about a minute cold).

    `log`, when given, receives the output of every build command. Concurrent callers wait for one
    build. Raises ServicesVenvError if Python 3.11 is missing or a build command fails.
    """
    link = venv_dir(requirements)
    if _ready(link):
        return link
    link.parent.mkdir(parents=True, exist_ok=True)
    with locked(link.parent / ".lock"):
        if _ready(link):  # built by whoever held the lock before us
            return link
        for stale in link.parent.glob("venv-*"):  # leftovers of killed builds: nobody else builds now
            shutil.rmtree(stale, ignore_errors=True)
        build = Path(tempfile.mkdtemp(prefix="venv-", dir=link.parent))
        try:
            build.chmod(0o755)  # mkdtemp's 0700 would hide the services from other users
            _build(build, requirements, log)
            swap = link.parent / f".venv-link-{os.getpid()}"
            swap.unlink(missing_ok=True)
            swap.symlink_to(build.name)
            if link.is_dir() and not link.is_symlink():  # a hand-made venv in the way
                shutil.rmtree(link)
            os.replace(swap, link)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
    return link


def _ready(link: Path) -> bool:
    return link.is_symlink() and python(link).exists()


def _build(venv: Path, requirements: Path, log: Path | None) -> None:
    py = str(python(venv))
    _run([_base_python(), "-m", "venv", str(venv)], log, STEP_TIMEOUT_S)
    _run([py, "-m", "pip", "install", "--no-deps", "-r", str(requirements)], log, INSTALL_TIMEOUT_S)
    _run([py, "-m", "pip", "check"], log, STEP_TIMEOUT_S)
    # The native MLMD library is what a wrong platform or glibc breaks; find out now, not in the cluster.
    _run([py, "-c", "import grpc, ml_metadata.metadata_store.pywrap.metadata_store_extension"], log, STEP_TIMEOUT_S)


def _base_python() -> str:
    if sys.version_info[:2] == PYTHON_VERSION:
        return sys.executable
    found = shutil.which("python{}.{}".format(*PYTHON_VERSION))
    if found is None:
        raise ServicesVenvError(
            "the KFP services venv needs Python {}.{} (ml-metadata 1.17.1 ships cp311 wheels only); this is "
            "Python {}.{} and python{}.{} is not on PATH: install it (e.g. `pyenv install 3.11`) or run from a "
            "3.11 interpreter".format(*PYTHON_VERSION, *sys.version_info[:2], *PYTHON_VERSION)
        )
    return found


def _run(argv: list[str], log: Path | None, timeout: float) -> None:
    command = " ".join(argv)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
                              timeout=timeout, check=False)  # fmt: skip
        output, failure = done.stdout, (f"exit {done.returncode}" if done.returncode != 0 else "")
    except subprocess.TimeoutExpired as e:
        partial = e.output or ""
        output = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        failure = f"no result after {timeout:.0f} s"
    except OSError as e:
        output, failure = "", f"could not start: {e}"
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write(f"$ {command}\n{output}\n")
    if failure:
        where = f" (full output in {log})" if log is not None else ""
        raise ServicesVenvError(f"building the KFP services venv: `{command}` failed ({failure}){where}:\n"
                                f"{output[-3000:]}")  # fmt: skip
