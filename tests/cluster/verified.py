"""Which of kubetrain's components the e2e tier verified on the real backend: their `lastVerified`.

Every run a scenario starts (`KfpBackend.start`) is noted against the test module it belongs to,
with the components its pipeline runs: a module's scenarios mostly start their runs side by side
from a module fixture, in threads, while pytest names only the test that set the fixture up, so a
run cannot be told apart by test. At the end of the session, a component is verified when at
least one module that ran it passed and none failed (a module passes when every phase of every
test of it did); its `components/<name>/metadata.yaml` then gets that time as `lastVerified` (the
hub's convention), ready to be committed with the change.

`make e2e` runs two pytest sessions side by side (tools/ci/e2e.py). Today only the KFP half starts
KFP runs, but a KFP module moved to the other half would let one session stamp what the other saw
fail. So there each session only saves its notes into the folder NOTES_ENV names, and
`python -m tests.cluster.verified FOLDER` writes the stamps once both have ended, from every
session's notes together.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kubetrain.tooling import hub

NOTES_ENV = "KUBETRAIN_VERIFIED_NOTES"  # a folder: save() there instead of record() (see the docstring)

_RAN: dict[str, set[str]] = {}  # test module (its pytest node id) -> components its runs used
_OUTCOME: dict[str, bool] = {}  # test module -> passed (every phase of every test of it)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def note_run(package: Path) -> None:
    """Note that the test module now running started a run of `package`."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    if current:
        _RAN.setdefault(_module(current), set()).update(hub.components_of_package(package))


def note_outcome(nodeid: str, passed: bool) -> None:
    """A phase of a test (`nodeid`) ended; its module passed only if every phase of every test did."""
    module = _module(nodeid)
    _OUTCOME[module] = _OUTCOME.get(module, True) and passed


def verified() -> set[str]:
    """The components some passing module ran and no failing one did."""
    passed = {c for s, used in _RAN.items() if _OUTCOME.get(s) for c in used}
    failed = {c for s, used in _RAN.items() if _OUTCOME.get(s) is False for c in used}
    return passed - failed


def record() -> list[Path]:
    """Write lastVerified (now, UTC) for the verified components; the files written."""
    names = verified()
    return hub.record_verified(names, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())) if names else []


def save(folder: Path) -> Path:
    """Write this session's notes into `folder` (one file per session), for main() to record; the file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"session-{os.getpid()}.json"
    path.write_text(json.dumps({"ran": {s: sorted(c) for s, c in _RAN.items()}, "outcome": _OUTCOME}))
    return path


def load(folder: Path) -> int:
    """Add every session's notes saved in `folder` to this process's; how many sessions."""
    paths = sorted(folder.glob("session-*.json"))
    for path in paths:
        notes = json.loads(path.read_text())
        for scenario, components in notes["ran"].items():
            _RAN.setdefault(scenario, set()).update(components)
        for scenario, passed in notes["outcome"].items():
            note_outcome(scenario, passed)
    return len(paths)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tests.cluster.verified FOLDER`: record lastVerified from the notes the sessions saved there."""
    (folder,) = sys.argv[1:] if argv is None else argv
    sessions = load(Path(folder))
    for path in record():
        print(f"lastVerified: {path.relative_to(path.parents[2])}")
    print(f"lastVerified: from {sessions} session(s)' notes in {folder}: {sorted(verified()) or 'none verified'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
