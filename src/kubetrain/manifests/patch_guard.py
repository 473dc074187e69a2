"""What a `manifest_patch` may not do: the security line and what the step owns.

The operators, not the launcher, create the job's pods, so whatever a patch puts in a pod template
runs with the operator's rights: a patch could otherwise go around the "restricted" Pod Security
Standard and the launcher's narrow Role (no `secrets`, no `pods create`). A patch may add what the
inputs do not cover (resources, scheduling, tolerations, labels, annotations, env vars, configMap /
emptyDir / PVC volumes and their mounts); it may not

- add anything "restricted" forbids: host namespaces, host paths, host ports, privileged or other
  security settings (every `securityContext` stays as built), containers or init containers;
- read a Secret or a service-account token: `secretKeyRef`, `envFrom.secretRef`, Secret, projected
  or CSI volumes, another service account or `automountServiceAccountToken`;
- change what has its own input or what kubetrain relies on: image, command and args, the runtime,
  kubetrain's volumes, mounts, env, labels and annotations, and the deadline (which may be added or
  lowered, never raised or removed).

Both manifests are indexed once, each field by its path as a tuple (an object's key, or a list
item by its unique name, else its index), so a key spelled like a path (`"containers[pytorch]"`,
`"template.spec"`) is a field of its own and never stands in for the one it imitates, and the
guard's work grows with the manifest's size, not its square.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from kubetrain.errors import ManifestError
from kubetrain.specs.scheduling import is_security_profile_key

# Keys past the security line: wherever they occur, they stay exactly as built (absent included).
_FORBIDDEN: dict[str, str] = {
    "hostNetwork": 'the "restricted" Pod Security Standard forbids host namespaces',
    "hostPID": 'the "restricted" Pod Security Standard forbids host namespaces',
    "hostIPC": 'the "restricted" Pod Security Standard forbids host namespaces',
    "hostUsers": 'the "restricted" Pod Security Standard forbids host namespaces',
    "hostPath": 'the "restricted" Pod Security Standard forbids hostPath volumes',
    "hostPort": 'the "restricted" Pod Security Standard forbids host ports',
    "hostIP": 'the "restricted" Pod Security Standard forbids host ports',
    "privileged": 'the "restricted" Pod Security Standard forbids privileged containers',
    "initContainers": "a patch may not add containers (their image and command would bypass the inputs)",
    "ephemeralContainers": "a patch may not add containers (their image and command would bypass the inputs)",
    "serviceAccountName": "set it with the service_account input",
    "serviceAccount": "set it with the service_account input",
    "automountServiceAccountToken": "the training pods get no API token; set service_account instead",
    "secretKeyRef": "a patch may not read Secrets (the launcher's Role has no access to them either)",
    "secretRef": "a patch may not read Secrets (the launcher's Role has no access to them either)",
    "secret": "a patch may not mount Secrets",
    "projected": "a patch may not mount projected volumes (service-account tokens, Secrets)",
    "serviceAccountToken": "a patch may not mount service-account tokens",
    "csi": "a patch may not mount CSI volumes (they can carry Secrets)",
}
# Keys the step owns (they have their own inputs): checked after the lists, so a patch that drops
# kubetrain's env or mounts hears about those first.
_OWNED: dict[str, str] = {
    "securityContext": "the pods keep the restricted Pod Security settings kubetrain builds (no added capabilities)",
    "image": "set it with the image input",
    "command": "set it with the command input",
    "args": "set it with the args input",
    "runtimeRef": "set it with the runtime input",
}
# The volume sources a patch may add: what "restricted" allows, less Secrets, tokens and CSI.
_VOLUME_SOURCES = frozenset({"configMap", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim"})
_DEADLINE = "activeDeadlineSeconds"
_METADATA = ("labels", "annotations")


def _json_key(item: object) -> Hashable:
    return json.dumps(item, sort_keys=True, default=str)


def _field(name: str) -> Callable[[object], Hashable]:
    def key(item: object) -> Hashable:
        value = item.get(name) if isinstance(item, Mapping) else None
        return value if isinstance(value, (str, int)) else _json_key(value)

    return key


def _port(item: object) -> Hashable:
    if not isinstance(item, Mapping):
        return _json_key(item)
    return (_field("containerPort")(item), item.get("protocol") or "TCP")


# Lists whose built items a patch must keep, unchanged, each item once: the noun for errors and the
# item's identity, as the API server tells the items apart (a second env var of the same name
# would override kubetrain's; a second mount at kubetrain's path would shadow it).
_KEPT_LISTS: dict[str, tuple[str, Callable[[object], Hashable]]] = {
    "env": ("env var", _field("name")),
    "envFrom": ("envFrom source", _json_key),
    "volumes": ("volume", _field("name")),
    "volumeMounts": ("volume mount", _field("mountPath")),
    "ports": ("port", _port),
    "containers": ("container", _field("name")),
}
_INDEXED = frozenset({*_FORBIDDEN, *_OWNED, *_KEPT_LISTS, *_METADATA, _DEADLINE})

# A field's place: object keys as they are, list items as ("[]", unique name or index). A key is
# never a tuple in JSON, so no key can pass for a list item, and no string for a path.
Segment = str | tuple[str, str | int]
Path = tuple[Segment, ...]


def _where(path: Path) -> str:
    """The path as errors show it: `a.b[name].c`; a key that itself holds '.', '[' or ']' is quoted."""
    out = ""
    for segment in path:
        if isinstance(segment, tuple):
            out += f"[{segment[1]}]"
        elif any(c in segment for c in '.[]"'):
            out += f"[{json.dumps(segment)}]"
        else:
            out += f".{segment}" if out else segment
    return out


def _item_name(item: object) -> str | None:
    name = item.get("name") if isinstance(item, Mapping) else None
    return name if isinstance(name, str) else None


def _index(tree: Any) -> dict[str, dict[Path, Any]]:
    """Every field of `tree` whose key the guard checks, by key, then by path; one pass, no recursion."""
    found: dict[str, dict[Path, Any]] = {key: {} for key in _INDEXED}
    todo: list[tuple[Path, Any]] = [((), tree)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                here: Path = (*path, key)
                if key in found:
                    found[key][here] = value
                todo.append((here, value))
        elif isinstance(node, list):
            names = Counter(_item_name(item) for item in node)
            for i, item in enumerate(node):
                name = _item_name(item)
                label: str | int = name if name is not None and names[name] == 1 else i
                todo.append(((*path, ("[]", label)), item))
    return found


def _refuse(where: str, problem: str) -> ManifestError:
    return ManifestError(f"manifest_patch: {where}", problem)


def _check_same(before: Mapping[str, Mapping[Path, Any]], after: Mapping[str, Mapping[Path, Any]],
                keys: Mapping[str, str]) -> None:  # fmt: skip
    for key, why in keys.items():
        was, now = before[key], after[key]
        for path in sorted(set(was) | set(now), key=_where):
            if was.get(path) != now.get(path):
                verb = "may not add" if path not in was else "may not change"
                raise _refuse(_where(path), f"{verb}: {why}")


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _labelled(items: Iterable[Any]) -> Iterable[tuple[str, Any]]:
    """The items of a list with the label the index gives them (unique name, else index)."""
    items = list(items)
    names = Counter(_item_name(item) for item in items)
    for i, item in enumerate(items):
        name = _item_name(item)
        yield (f"[{name}]" if name is not None and names[name] == 1 else f"[{i}]"), item


def _check_kept_lists(before: Mapping[str, Mapping[Path, Any]], after: Mapping[str, Mapping[Path, Any]]) -> None:
    for key, (noun, identity) in _KEPT_LISTS.items():
        for path, built in sorted(before[key].items(), key=lambda entry: _where(entry[0])):
            if not isinstance(built, list):
                continue
            now = _items(after[key].get(path))
            same: dict[Hashable, list[Any]] = {}
            for item in now:
                same.setdefault(identity(item), []).append(item)
            for label, item in _labelled(built):
                matches = same.get(identity(item), [])
                # A container's fields are checked one by one (its resources may change); every
                # other item of kubetrain's stays exactly as built.
                kept = len(matches) == 1 and (key == "containers" or matches[0] == item)
                if not kept:
                    problem = "repeat" if len(matches) > 1 else "drop or change"
                    raise _refuse(f"{_where(path)}{label}", f"may not {problem} kubetrain's {noun}")
            if key == "containers":
                built_names = {identity(item) for item in built}
                for label, item in _labelled(now):
                    if identity(item) not in built_names:
                        raise _refuse(f"{_where(path)}{label}", f"may not add: {_FORBIDDEN['initContainers']}")


def _check_new_volumes(before: Mapping[str, Mapping[Path, Any]], after: Mapping[str, Mapping[Path, Any]]) -> None:
    for path, items in sorted(after["volumes"].items(), key=lambda entry: _where(entry[0])):
        built = {_item_name(item): item for item in _items(before["volumes"].get(path))}
        for label, item in _labelled(_items(items)):
            if not isinstance(item, Mapping) or built.get(_item_name(item)) == item:
                continue
            for source in sorted(set(item) - {"name"} - _VOLUME_SOURCES):
                raise _refuse(
                    f"{_where(path)}{label}.{source}",
                    f"may not add: a patch may add only {', '.join(sorted(_VOLUME_SOURCES))} volumes",
                )


def _check_metadata(before: Mapping[str, Mapping[Path, Any]], after: Mapping[str, Mapping[Path, Any]]) -> None:
    for key in _METADATA:
        for path, values in sorted(before[key].items(), key=lambda entry: _where(entry[0])):
            if not isinstance(values, Mapping):
                continue
            now = after[key].get(path)
            now_values = now if isinstance(now, Mapping) else {}
            for name, value in values.items():
                if now_values.get(name) != value:
                    raise _refuse(
                        f"{_where(path)}.{name}", f"may not change or remove kubetrain's {key[:-1]} ({value!r})"
                    )
        # The same rule as the labels and annotations inputs (specs.scheduling).
        for path, added in sorted(after[key].items(), key=lambda entry: _where(entry[0])):
            for name in added if isinstance(added, Mapping) else ():
                if is_security_profile_key(name):
                    raise _refuse(
                        f"{_where(path)}.{name}", "may not set a security profile: the pods keep RuntimeDefault"
                    )


def _check_deadlines(before: Mapping[str, Mapping[Path, Any]], after: Mapping[str, Mapping[Path, Any]]) -> None:
    for path, value in sorted(before[_DEADLINE].items(), key=lambda entry: _where(entry[0])):
        now = after[_DEADLINE].get(path)
        if not isinstance(now, int) or isinstance(now, bool) or not 1 <= now <= value:
            raise _refuse(
                _where(path),
                f"may not raise or remove kubetrain's deadline ({value!r} → {now!r}); it may only be lowered, "
                "to 1 second or more",
            )


def check_patch_guard(built: Any, patched: Any) -> None:
    """Raise ManifestError naming the first field the patch may not add or change (see the module doc)."""
    before, after = _index(built), _index(patched)
    _check_same(before, after, _FORBIDDEN)
    _check_kept_lists(before, after)
    _check_same(before, after, _OWNED)
    _check_new_volumes(before, after)
    _check_metadata(before, after)
    _check_deadlines(before, after)
