"""Loading a compiled kubetrain component for reuse, with its TaskConfig passthroughs intact.

`kfp.components.load_component_from_file/url` (kfp 2.15–2.17) reads a component's inputs,
outputs and executor from the YAML but drops its `taskConfigPassthroughs`: a pipeline built from
the loaded component then applies task resources, tolerations, node selectors and node affinity
to the launcher pod instead of handing them to the training pods. The loaded component still works; its explicit
`cpu`, `memory` and `gpus` inputs set the training pods' resources either way. This loader
restores the passthroughs the YAML declares.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import yaml

from kubetrain.errors import InvalidInputError


def passthroughs_in(text: str) -> list[tuple[str, bool]]:
    """(field name, apply_to_task) for each TaskConfig passthrough a compiled component declares."""
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if not docs or not isinstance(docs[0], dict):
        raise InvalidInputError("not a compiled KFP component: the YAML holds no pipeline spec")
    found: list[tuple[str, bool]] = []
    for component in (docs[0].get("components") or {}).values():
        for item in component.get("taskConfigPassthroughs") or ():
            found.append((str(item["field"]), bool(item.get("applyToTask", False))))
    return found


def read_text(source: str) -> str:
    """The text of a local file or an http(s) URL."""
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=60) as response:
            data: bytes = response.read()
        return data.decode("utf-8")
    path = Path(source)
    if not path.is_file():
        raise InvalidInputError(f"{source}: no such component file")
    return path.read_text(encoding="utf-8")


def load_component(source: str) -> Any:
    """`kfp.components.load_component_from_text` of a file or URL, plus its TaskConfig passthroughs."""
    from kfp import components, dsl

    text = read_text(source)
    component = components.load_component_from_text(text)
    declared = passthroughs_in(text)
    if declared:
        component.component_spec.task_config_passthroughs = [
            dsl.TaskConfigPassthrough(field=dsl.TaskConfigField[name], apply_to_task=apply) for name, apply in declared
        ]
    return component
