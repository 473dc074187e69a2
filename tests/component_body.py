"""A component's body run as KFP's executor runs it (its `python_func`), the library function it calls replaced.

The hub's `test_component_unit.py` form, for the components' own tests (components/<name>/tests/):
what a body owns is which function it calls and what it hands over; the function itself is the
library's and tested there.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest


def sentinels(component: Any) -> dict[str, object]:
    """A distinct object for each input of the component, by name: what arrives where shows which was passed."""
    return {name: object() for name in inspect.signature(component.python_func).parameters}


def run_body(
    component: Any, target: str, monkeypatch: pytest.MonkeyPatch, inputs: dict[str, object]
) -> tuple[dict[str, Any], bool]:
    """Call the component's body with `inputs`, `target` ("module.function") recording its one call.

    Returns the keywords the body called it with, and whether it returned what the function returned.
    """
    calls: list[dict[str, Any]] = []
    result = object()

    def record(*args: Any, **kwargs: Any) -> object:
        assert not args, f"{target} called with positional arguments {args}"
        calls.append(kwargs)
        return result

    monkeypatch.setattr(target, record)
    returned = component.python_func(**inputs)
    assert len(calls) == 1, f"the body called {target} {len(calls)} times"
    return calls[0], returned is result
