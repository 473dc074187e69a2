"""Which of kubetrain's components the e2e tier verified on the real backend: their `lastVerified`.

Every run a scenario starts (`KfpBackend.start`) is noted against that scenario with the
components its pipeline runs. At the end of the session, a component is verified when at least
one scenario that ran it passed and none failed; its `components/<name>/metadata.yaml` then
gets that time as `lastVerified` (the hub's convention), ready to be committed with the change.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kubetrain.tooling import hub

_RAN: dict[str, set[str]] = {}  # scenario (pytest node id) -> components its runs used
_OUTCOME: dict[str, bool] = {}  # scenario -> passed (every phase of it)


def note_run(package: Path) -> None:
    """Note that the scenario now running started a run of `package`."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    scenario = current.rsplit(" (", 1)[0]
    if scenario:
        _RAN.setdefault(scenario, set()).update(hub.components_of_package(package))


def note_outcome(scenario: str, passed: bool) -> None:
    """A phase of a scenario ended; it passed only if every phase did."""
    _OUTCOME[scenario] = _OUTCOME.get(scenario, True) and passed


def verified() -> set[str]:
    """The components some passing scenario ran and no failing one did."""
    passed = {c for s, used in _RAN.items() if _OUTCOME.get(s) for c in used}
    failed = {c for s, used in _RAN.items() if _OUTCOME.get(s) is False for c in used}
    return passed - failed


def record() -> list[Path]:
    """Write lastVerified (now, UTC) for the verified components; the files written."""
    names = verified()
    return hub.record_verified(names, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())) if names else []
