"""What a container sees, translated to this machine: env, `$(VAR)` references, host names, paths.

- `$(VAR)` references in env values, command and args are expanded as the kubelet does.
- Host names the manifest uses (operator service names, JobSet and MPI host names, with or without
  `.<ns>.svc.cluster.local`) become each replica's loopback address; ports stay as they are.
- Volume mount paths become local directories wherever a value starts with one (also after `=`,
  `:`, `,` or a space, so `--data=/workspace/x` and shell strings are translated too).
- The replica inherits this process's environment minus the variables an operator owns (a
  `RANK` or `OMPI_*` of the caller must not leak into a replica), and `python`/`python3` mean the
  interpreter kubetrain runs under, also inside shell commands (a shim directory leads PATH).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

# Variables an operator or a batch Job sets; inherited values of the caller are dropped.
_OWNED_EXACT = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "ROLE_RANK",
        "JOB_COMPLETION_INDEX",
        "K_MPI_JOB_ROLE",
        "HOSTNAME",
    }
)
_OWNED_PREFIXES = ("PET_", "TORCHELASTIC_", "OMPI_", "PMIX_", "PMI_", "I_MPI_", "HYDRA_")
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


def inherited_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without the variables operators own."""
    source = os.environ if base is None else base
    return {
        k: v for k, v in source.items() if k not in _OWNED_EXACT and not any(k.startswith(p) for p in _OWNED_PREFIXES)
    }


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
