"""The escape hatch: a JSON merge patch (RFC 7386) applied to an emitted manifest, then validated.

For what the component inputs do not cover (a scheduler name, a field of a newer operator), the
user gives a merge patch: objects merge key by key, ``null`` deletes a key, anything else
replaces, lists included, but for the lists of named items in :data:`LIST_MERGE_KEYS`
(containers, env, volumes, mounts, ports, replicated jobs), which merge item by item as `kubectl
patch` merges them. The result goes through the same checks as every manifest kubetrain builds
(the controllers' rules, and the CRD schema with undeclared fields as errors where the CRDs are
at hand), the job's identity must stay as built, and the patch may not cross the security line or
change what the step owns (`patch_guard`), so a bad patch is refused before anything is submitted,
naming the field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubetrain.errors import InvalidInputError, ManifestError
from kubetrain.manifests.patch_guard import check_patch_guard
from kubetrain.manifests.pod import Manifest
from kubetrain.manifests.validate import validate_manifest

# How deep a patch (or any JSON input) may nest: a Kubernetes object patch is about ten levels
# deep; thousands would only exhaust Python's recursion in the parser or the merge (a
# RecursionError traceback), and KFP cannot carry a Struct over 100 levels deep.
MAX_JSON_DEPTH = 64

# Lists of a job manifest that a patch merges item by item (`merge_patch`), by the keys Kubernetes'
# strategic merge patch uses for them: a patch names the container, env var, volume, mount, port or
# replicated job it changes and leaves kubetrain's others as built, so it need not repeat items
# that carry the job's own name (the program's output path in args, the PS addresses in env) and
# so differ from run to run. Every other list is replaced, as RFC 7386 says.
LIST_MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "replicatedJobs": "name",
}
# What a patch may not change: the job's identity (its name is derived per task; retries adopt it).
_IDENTITY = (("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"))


def json_depth(data: object) -> int:
    """How deeply `data` nests lists and objects (a scalar is 0), without recursion."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, Mapping) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            todo.extend((child, depth + 1) for child in children)
    return deepest


def check_json_depth(data: object, field: str) -> None:
    """InvalidInputError naming `field` when `data` nests deeper than MAX_JSON_DEPTH."""
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise InvalidInputError(
            f"{field}: got JSON nested {depth} levels deep; expected at most {MAX_JSON_DEPTH} levels of lists "
            "and objects (a Kubernetes patch needs about ten)"
        )


def merge_patch(target: Any, patch: Any, *, list_keys: Mapping[str, str] | None = None) -> Any:
    """RFC 7386 MergePatch(target, patch); neither argument is modified.

    With `list_keys` (a field name -> the key its items are told apart by), a list under such a
    field whose items all carry that key merges item by item instead of being replaced, as
    Kubernetes' strategic merge patch merges them: a patch item merges into the item with the same
    key, or is added; the others stay.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        item_key = (list_keys or {}).get(key)
        if value is None:
            result.pop(key, None)
        elif item_key is not None and _keyed(result.get(key), item_key) and _keyed(value, item_key):
            result[key] = _merge_items(result[key], value, item_key, list_keys)
        else:
            result[key] = merge_patch(result.get(key), value, list_keys=list_keys)
    return result


def _keyed(items: object, item_key: str) -> bool:
    """Whether `items` is a list of objects each with a string or integer `item_key`."""
    return isinstance(items, list) and all(
        isinstance(item, Mapping)
        and isinstance(item.get(item_key), (str, int))
        and not isinstance(item.get(item_key), bool)
        for item in items
    )


def _merge_items(target: list[Any], patch: list[Any], item_key: str, list_keys: Mapping[str, str] | None) -> list[Any]:
    merged = list(target)
    position = {item[item_key]: i for i, item in enumerate(merged)}
    for item in patch:
        at = position.setdefault(item[item_key], len(merged))
        if at == len(merged):
            merged.append(merge_patch(None, item, list_keys=list_keys))
        else:
            merged[at] = merge_patch(merged[at], item, list_keys=list_keys)
    return merged


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def apply_manifest_patch(manifest: Manifest, patch: object, *, crd_dir: Path | None = None) -> Manifest:
    """`manifest` with the merge patch applied, validated strictly; ManifestError names what is wrong."""
    if not isinstance(patch, Mapping):
        raise ManifestError("manifest_patch", f"expected a JSON object (an RFC 7386 merge patch), got {patch!r}")
    check_json_depth(patch, "manifest_patch")  # before the recursive merge
    patched: Manifest = merge_patch(manifest, patch, list_keys=LIST_MERGE_KEYS)
    for path in _IDENTITY:
        if _get(patched, path) != _get(manifest, path):
            raise ManifestError(
                f"manifest_patch: {'.'.join(path)}",
                f"may not change ({_get(manifest, path)!r} → {_get(patched, path)!r}); kubetrain derives it",
            )
    check_patch_guard(manifest, patched)
    try:
        validate_manifest(patched, crd_dir=crd_dir)
    except ManifestError as e:
        raise ManifestError(f"manifest_patch: {e.path}", f"{e.problem} (in the patched manifest)") from e
    return patched
