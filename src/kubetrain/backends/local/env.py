"""What a container sees, translated to this machine: env, `$(VAR)` references, host names, paths.

- `$(VAR)` references in env values, command and args are expanded as the kubelet does.
- Host names the manifest uses (operator service names, JobSet and MPI host names, with or without
  `.<ns>.svc.cluster.local`) become each replica's loopback address; ports stay as they are (the
  operators' rendezvous ports aside, see the package docstring).
- Volume mount paths become local directories wherever a value starts with one (also after `=`,
  `:`, `,` or a space, so `--data=/workspace/x` and shell strings are translated too).
- A replica's environment is what a pod's would be: its image's ENV (:func:`image_environment`),
  then the manifest's env and what the operator injects; plus, from this machine, only what a
  process needs to run here (:data:`MACHINE_ENV`: PATH, locale, CA bundle and proxy settings,
  HOME, TMPDIR, the interpreter's PYTHONPATH, thread limits). Nothing else of the caller's shell
  reaches it (a `RANK`, `OMPI_*` or `FOO` of the caller would not reach a pod either). `python`/
  `python3` mean the interpreter kubetrain runs under, also inside shell commands (a shim
  directory leads PATH).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

# What a replica takes from this machine's environment, and nothing else: a pod gets its env from
# its image, its manifest and its operator, but a local process also needs to find programs and
# libraries here (PATH, LD_LIBRARY_PATH, the venv, Open MPI's OPAL_PREFIX), speak the locale, trust
# the CA bundle and use the proxy this machine uses, a home and a temporary directory (Open MPI
# puts its session directory under TMPDIR), the interpreter's import path (locally the "image" is
# this interpreter; PYTHONPATH is how a user's module gets into it) and the thread limits that
# keep several replicas from oversubscribing a small machine (`kubetrain run` sets them).
MACHINE_ENV = frozenset(
    {
        "PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "OPAL_PREFIX",
        "LANG", "LANGUAGE", "TZ",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
        "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_CACHE_HOME",
        "PYTHONPATH",
        "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    }
)  # fmt: skip
MACHINE_ENV_PREFIXES = ("LC_",)
# The ENV of kubetrain's images (images/Dockerfile; tests/unit/test_local_env.py holds the two
# together), which a pod of that image sees before its manifest's env. HOME is left out: locally it
# stays this machine's. The names are the images' repository names, whatever the registry and tag.
_COMMON_IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
IMAGE_ENV: Mapping[str, Mapping[str, str]] = {
    "launcher": dict(_COMMON_IMAGE_ENV),
    "pytorch": dict(_COMMON_IMAGE_ENV),
    # Chainer 7.8.1 imports numpy.distutils, which setuptools' own distutils breaks.
    # Its pkg_resources import warns on every import, once per rank per start: noise in the log tails.
    "chainermn": {
        **_COMMON_IMAGE_ENV,
        "SETUPTOOLS_USE_DISTUTILS": "stdlib",
        "PYTHONWARNINGS": "ignore:pkg_resources:UserWarning",
    },
    "ps": dict(_COMMON_IMAGE_ENV),
}
_TRAINING_IMAGES = ("pytorch", "chainermn", "ps")
_PYTHON_NAMES = re.compile(r"^python(3(\.\d+)?)?$")
# Characters that may precede a rewritten path or host (start of a token).
_PATH_BEFORE = "\\s=:,;'\"(\\[{"
_PATH_AFTER = "/\\s:,;'\")\\]}"


def expand_references(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion: defined names are replaced, `$$` escapes, the rest stays."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt == "(":
            end = text.find(")", i + 2)
            if end != -1:
                name = text[i + 2 : end]
                out.append(env[name] if name in env else text[i : end + 1])
                i = end + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


class Rewriter:
    """Rewrites host names to loopback addresses and mount paths to local directories."""

    def __init__(self, *, hosts: Mapping[str, str], namespace: str, mounts: Mapping[str, str]) -> None:
        """`hosts`: base host name (`job-master-0`, `js-ps-0-0.js`) → replacement address."""
        self._hosts = dict(hosts)
        self._mounts = {_strip_slash(k): v for k, v in mounts.items() if _strip_slash(k)}
        self._host_re: re.Pattern[str] | None = None
        self._path_re: re.Pattern[str] | None = None
        if self._hosts:
            ns = re.escape(namespace)
            suffix = rf"(?:\.{ns}(?:\.svc(?:\.cluster\.local)?)?)?"
            names = "|".join(re.escape(h) for h in sorted(self._hosts, key=len, reverse=True))
            self._host_re = re.compile(rf"(?<![A-Za-z0-9_.-])({names}){suffix}(?![A-Za-z0-9_-])(?!\.[A-Za-z0-9])")
        if self._mounts:
            paths = "|".join(re.escape(p) for p in sorted(self._mounts, key=len, reverse=True))
            self._path_re = re.compile(rf"(?<![^{_PATH_BEFORE}])({paths})(?=$|[{_PATH_AFTER}])")

    def rewrite(self, text: str) -> str:
        """`text` with every known host name and mount path translated."""
        if self._host_re is not None:
            text = self._host_re.sub(lambda m: self._hosts[m.group(1)], text)
        if self._path_re is not None:
            text = self._path_re.sub(lambda m: self._mounts[m.group(1)], text)
        return text

    def local_path(self, path: str) -> str:
        """A single path (e.g. `workingDir`) translated, or unchanged when under no mount."""
        return self.rewrite(path)


def _strip_slash(path: str) -> str:
    return path.rstrip("/")


def machine_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of this machine's environment (default `os.environ`) a replica gets: :data:`MACHINE_ENV`."""
    source = os.environ if base is None else base
    return {k: v for k, v in source.items() if k in MACHINE_ENV or k.startswith(MACHINE_ENV_PREFIXES)}


def image_repository(image: str) -> str:
    """An image reference's last path component without tag or digest (`ghcr.io/kubetrain/ps:1.0` → `ps`)."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def image_environment(image: str) -> dict[str, str]:
    """The ENV a container of `image` starts with.

    For one of kubetrain's images, that image's ENV. Any other image runs locally on this
    interpreter, which holds what kubetrain's training images hold: it gets their ENV together
    (so a user's own Chainer program imports Chainer here as it does in the chainermn image).
    """
    known = IMAGE_ENV.get(image_repository(image))
    if known is not None:
        return dict(known)
    merged: dict[str, str] = {}
    for name in _TRAINING_IMAGES:
        merged.update(IMAGE_ENV[name])
    return merged


def ensure_python_shims(shim_dir: Path) -> Path:
    """A directory whose `python` and `python3` run this interpreter (for shell commands)."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    script = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    for name in ("python", "python3"):
        path = shim_dir / name
        if not path.exists() or path.read_text() != script:
            tmp = shim_dir / f".{name}.{os.getpid()}"
            tmp.write_text(script)
            tmp.chmod(0o755)
            tmp.replace(path)
    return shim_dir


def search_path(shim_dir: Path, inherited_path: str) -> str:
    """PATH for replicas: the python shims, then this interpreter's bin directory, then the caller's."""
    parts = [str(shim_dir), str(Path(sys.executable).parent), *inherited_path.split(os.pathsep)]
    seen: list[str] = []
    for part in parts:
        if part and part not in seen:
            seen.append(part)
    return os.pathsep.join(seen)


def resolve_command(argv: Sequence[str], path: str) -> list[str] | None:
    """argv with its program resolved on this machine, or None when it does not exist here.

    `python`, `python3`, `python3.X` and absolute paths ending in one of them (the image's
    interpreter) mean the interpreter kubetrain runs under.
    """
    program = argv[0]
    if _PYTHON_NAMES.match(Path(program).name):
        return [sys.executable, *argv[1:]]
    if "/" in program:
        return list(argv) if os.access(program, os.X_OK) and not os.path.isdir(program) else None
    found = shutil.which(program, path=path)
    return [found, *argv[1:]] if found else None


# Python's options that take the next argument as their value (`-W ignore`, `-X dev`).
_PYTHON_VALUE_OPTIONS = frozenset("WX")


def python_script(argv: Sequence[str]) -> int | None:
    """The index in `argv` of the script a `python ...` command runs, or None (`-c`, `-m`, stdin, not Python).

    Also under `mpirun`/`mpiexec` and mpi4py's runner (`mpirun ... python -m mpi4py SCRIPT`), as
    the MPI launchers run a program.
    """
    i = 0
    if argv and Path(argv[0]).name in ("mpirun", "mpiexec"):
        i = next((j for j, arg in enumerate(argv) if _PYTHON_NAMES.match(Path(arg).name)), len(argv))
    if i >= len(argv) or not _PYTHON_NAMES.match(Path(argv[i]).name):
        return None
    i += 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return i + 1 if i + 1 < len(argv) else None
        if arg == "-" or not arg.startswith("-"):
            return None if arg == "-" else i
        if arg == "-m" and argv[i + 1 : i + 2] == ["mpi4py"]:
            i += 2  # mpi4py's runner: its own --rc options, then the script (or -m, -c, -)
            while i < len(argv) and argv[i].startswith("--rc"):
                i += 1
            continue
        if arg == "--check-hash-based-pycs":
            i += 1  # the one long option that takes a value
        elif not arg.startswith("--"):
            flags = arg[1:]
            for at, flag in enumerate(flags):
                if flag in "cm":
                    return None
                if flag in _PYTHON_VALUE_OPTIONS:
                    i += 1 if at == len(flags) - 1 else 0  # `-W ignore`, not `-Wignore`
                    break
        i += 1
    return None


def pod_ip_field(address: str) -> dict[str, str]:
    """The pod-level fields a downward-API `fieldRef` can name, apart from labels/annotations."""
    return {
        "status.podIP": address,
        "status.podIPs": address,
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
        "spec.nodeName": "localhost",
    }


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def resolve_field_ref(
    field_path: str,
    *,
    name: str,
    namespace: str,
    uid: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    address: str,
    service_account: str,
) -> str | None:
    """The value of a downward-API field, or None when the field is not one the API server allows."""
    simple = {
        "metadata.name": name,
        "metadata.namespace": namespace,
        "metadata.uid": uid,
        "spec.serviceAccountName": service_account,
        **pod_ip_field(address),
    }
    if field_path in simple:
        return simple[field_path]
    match = _LABEL_REF.match(field_path)
    if match:
        source = labels if match.group(1) == "labels" else annotations
        return source.get(match.group(2), "")
    if field_path in ("metadata.labels", "metadata.annotations"):
        source = labels if field_path == "metadata.labels" else annotations
        return "\n".join(f'{k}="{v}"' for k, v in sorted(source.items()))
    return None


def env_items(names_values: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """`env[]` entries for literal values, in order."""
    return [{"name": n, "value": v} for n, v in names_values]


_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
}  # fmt: skip


def _quantity(value: str) -> float:
    match = _QUANTITY.match(value.strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"unsupported resource quantity {value!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def resource_field_value(ref: Mapping[str, object], resources: Mapping[str, object]) -> str:
    """A `resourceFieldRef` value: the container's request/limit, else this machine's capacity.

    As in the kubelet the value is divided by `divisor` (default 1) and rounded up.
    """
    resource = str(ref.get("resource") or "")
    section, _, name = resource.partition(".")
    table = resources.get(section) if section in ("limits", "requests") else None
    declared = table.get(name) if isinstance(table, Mapping) else None
    if declared is not None:
        amount = _quantity(str(declared))
    elif name == "cpu":
        amount = float(os.cpu_count() or 1)
    elif name == "memory":
        amount = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    else:
        amount = 0.0
    divisor = _quantity(str(ref.get("divisor") or "1")) or 1.0
    return str(math.ceil(amount / divisor))
