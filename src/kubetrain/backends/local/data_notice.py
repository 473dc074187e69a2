"""Where a locally launched job looks for its data set, said when nothing is there yet.

`kubetrain render` names the data set as the pods see it (`--data /workspace/datasets/digits`,
and `KUBETRAIN_DATA_DIR` for a user's own program); `kubetrain launch --local` maps the workspace
claim to a directory of this machine, which holds nothing until a data set is put there. Without a
word the program then finds an empty or missing directory, and its error says nothing of where
the data set should have been. :func:`missing_data_notice` names the local directory instead, with
the command that fills it.
"""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kubetrain.presets import WORKSPACE_ENV

_DATA_ENV = WORKSPACE_ENV[0]  # KUBETRAIN_DATA_DIR
_DATA_FLAG = "--data"


def _pod_specs(node: Any) -> Iterator[Mapping[str, Any]]:
    """Every pod spec of the manifest (a mapping with `containers`), however deep its kind nests them."""
    todo = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, Mapping):
            if isinstance(item.get("containers"), list):
                yield item
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


def _data_paths(container: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(pod path, where it was named) of the data set in one container: the env var and the flag."""
    for item in container.get("env") or ():
        if isinstance(item, Mapping) and item.get("name") == _DATA_ENV and isinstance(item.get("value"), str):
            yield item["value"], _DATA_ENV
    args = [str(a) for a in (*(container.get("command") or ()), *(container.get("args") or ()))]
    for flag, value in itertools.pairwise(args):
        if flag == _DATA_FLAG:
            yield value, _DATA_FLAG


def _local_dir(pod: Mapping[str, Any], container: Mapping[str, Any], path: str,
               claim_dir: Callable[[str], Path]) -> Path | None:  # fmt: skip
    """Where `path` lies on this machine: under the claim of the PVC mounted above it; None for any other path."""
    claims = {
        v.get("name"): v["persistentVolumeClaim"].get("claimName")
        for v in pod.get("volumes") or ()
        if isinstance(v, Mapping) and isinstance(v.get("persistentVolumeClaim"), Mapping)
    }
    normalized = posixpath.normpath(path)
    for mount in container.get("volumeMounts") or ():
        mount_path = str(mount.get("mountPath") or "").rstrip("/")
        claim = claims.get(mount.get("name"))
        if not claim or not mount_path or not (normalized + "/").startswith(mount_path + "/"):
            continue
        rest = [part for part in normalized[len(mount_path) :].split("/") if part]
        sub = [part for part in str(mount.get("subPath") or "").split("/") if part]
        return claim_dir(str(claim)).joinpath(*sub, *rest)
    return None


def _empty(directory: Path) -> bool:
    try:
        return not directory.is_dir() or next(directory.iterdir(), None) is None
    except OSError:
        return True  # unreadable: the program will not read it either


def missing_data_notice(manifest: Mapping[str, Any], claim_dir: Callable[[str], Path]) -> str | None:
    """A line naming each data set directory of `manifest` that is missing or empty on this machine, or None.

    `claim_dir` maps a PersistentVolumeClaim's name to its local directory (`LocalBackend.claim_dir`).
    """
    missing: dict[Path, tuple[str, list[str]]] = {}
    for pod in _pod_specs(manifest):
        for container in pod.get("containers") or ():
            if not isinstance(container, Mapping):
                continue
            for path, named in _data_paths(container):
                local = _local_dir(pod, container, path, claim_dir)
                if local is not None and _empty(local):
                    names = missing.setdefault(local, (path, []))[1]
                    if named not in names:
                        names.append(named)
    if not missing:
        return None
    parts = [
        f"{path} ({', '.join(names)}) is {local}, which is missing or empty" for local, (path, names) in missing.items()
    ]
    example = next(iter(missing))
    return (
        f"locally, the data set directory {'; '.join(parts)}: put the data set there before the job reads it, "
        f"e.g. `kubetrain download builtin:digits --out {example}`"
    )
