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

Lists are compared by item name (a merge patch replaces a whole list, so a patch that lists the
containers must repeat kubetrain's env and mounts; dropping them is refused, not done silently).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
# Lists whose built items a patch must keep, unchanged.
_KEPT_LISTS: dict[str, str] = {
    "env": "env var",
    "envFrom": "envFrom source",
    "volumes": "volume",
    "volumeMounts": "volume mount",
    "ports": "port",
    "containers": "container",
}
_DEADLINE = "activeDeadlineSeconds"
_LIST_RULE = (
    "a list in a merge patch replaces the whole list: repeat kubetrain's items as `kubetrain render` prints them, "
    "and add yours"
)


def _item_key(item: Any, index: int, names: list[Any]) -> str:
    name = item.get("name") if isinstance(item, Mapping) else None
    return f"[{name}]" if isinstance(name, str) and names.count(name) == 1 else f"[{index}]"


def _find(obj: Any, key: str, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) of `key` in `obj`; list items are addressed by their unique name."""
    if isinstance(obj, Mapping):
        for k, value in obj.items():
            where = f"{path}.{k}" if path else str(k)
            if k == key:
                yield where, value
            yield from _find(value, key, where)
    elif isinstance(obj, list):
        names = [item.get("name") if isinstance(item, Mapping) else None for item in obj]
        for i, value in enumerate(obj):
            yield from _find(value, key, f"{path}{_item_key(value, i, names)}")


def _refuse(where: str, problem: str) -> ManifestError:
    return ManifestError(f"manifest_patch: {where}", problem)


def _check_same(built: Any, patched: Any, keys: Mapping[str, str]) -> None:
    for key, why in keys.items():
        before = dict(_find(built, key))
        after = dict(_find(patched, key))
        for where in sorted(set(before) | set(after)):
            if before.get(where) != after.get(where):
                verb = "may not add" if where not in before else "may not change"
                raise _refuse(where, f"{verb}: {why}")


def _check_kept_lists(built: Any, patched: Any) -> None:
    for key, noun in _KEPT_LISTS.items():
        after = dict(_find(patched, key))
        for where, items in _find(built, key):
            if not isinstance(items, list):
                continue
            now = after.get(where)
            now_items = now if isinstance(now, list) else []
            names = [item.get("name") if isinstance(item, Mapping) else None for item in items]
            for i, item in enumerate(items):
                if key == "containers":
                    kept = any(isinstance(c, Mapping) and c.get("name") == item.get("name") for c in now_items)
                else:
                    kept = item in now_items
                if not kept:
                    raise _refuse(
                        f"{where}{_item_key(item, i, names)}",
                        f"may not drop or change kubetrain's {noun} ({_LIST_RULE})",
                    )
            if key == "containers":
                built_names = {c.get("name") for c in items if isinstance(c, Mapping)}
                for c in now_items:
                    name = c.get("name") if isinstance(c, Mapping) else None
                    if name not in built_names:
                        raise _refuse(f"{where}[{name}]", f"may not add: {_FORBIDDEN['initContainers']}")


def _check_new_volumes(built: Any, patched: Any) -> None:
    before = dict(_find(built, "volumes"))
    for where, items in _find(patched, "volumes"):
        kept = before.get(where)
        kept_items = kept if isinstance(kept, list) else []
        if not isinstance(items, list):
            continue
        names = [item.get("name") if isinstance(item, Mapping) else None for item in items]
        for i, item in enumerate(items):
            if item in kept_items or not isinstance(item, Mapping):
                continue
            for source in sorted(set(item) - {"name"} - _VOLUME_SOURCES):
                raise _refuse(
                    f"{where}{_item_key(item, i, names)}.{source}",
                    f"may not add: a patch may add only {', '.join(sorted(_VOLUME_SOURCES))} volumes",
                )


def _check_metadata(built: Any, patched: Any) -> None:
    for key in ("labels", "annotations"):
        after = dict(_find(patched, key))
        for where, values in _find(built, key):
            if not isinstance(values, Mapping):
                continue
            now = after.get(where)
            now_values = now if isinstance(now, Mapping) else {}
            for name, value in values.items():
                if now_values.get(name) != value:
                    raise _refuse(f"{where}.{name}", f"may not change or remove kubetrain's {key[:-1]} ({value!r})")
        # The same rule as the labels and annotations inputs (specs.scheduling).
        for where, added in _find(patched, key):
            if isinstance(added, Mapping):
                for name in added:
                    if is_security_profile_key(name):
                        raise _refuse(f"{where}.{name}", "may not set a security profile: the pods keep RuntimeDefault")


def _check_deadlines(built: Any, patched: Any) -> None:
    after = dict(_find(patched, _DEADLINE))
    for where, value in _find(built, _DEADLINE):
        now = after.get(where)
        if not isinstance(now, int) or isinstance(now, bool) or now > value:
            raise _refuse(
                where, f"may not raise or remove kubetrain's deadline ({value!r} → {now!r}); it may only be lowered"
            )


def check_patch_guard(built: Any, patched: Any) -> None:
    """Raise ManifestError naming the first field the patch may not add or change (see the module doc)."""
    _check_same(built, patched, _FORBIDDEN)
    _check_kept_lists(built, patched)
    _check_same(built, patched, _OWNED)
    _check_new_volumes(built, patched)
    _check_metadata(built, patched)
    _check_deadlines(built, patched)
