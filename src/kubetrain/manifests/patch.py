"""The escape hatch: a JSON merge patch (RFC 7386) applied to an emitted manifest, then validated.

For what the component inputs do not cover (a scheduler name, a field of a newer operator), the
user gives a merge patch: objects merge key by key, ``null`` deletes a key, anything else (lists
included) replaces. The result goes through the same checks as every manifest kubetrain builds
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


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch(target, patch); neither argument is modified."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def apply_manifest_patch(manifest: Manifest, patch: object, *, crd_dir: Path | None = None) -> Manifest:
    """`manifest` with the merge patch applied, validated strictly; ManifestError names what is wrong."""
    if not isinstance(patch, Mapping):
        raise ManifestError("manifest_patch", f"expected a JSON object (an RFC 7386 merge patch), got {patch!r}")
    check_json_depth(patch, "manifest_patch")  # before the recursive merge
    patched: Manifest = merge_patch(manifest, patch)
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
