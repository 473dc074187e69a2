"""Print kubetrain's requirements for the given extras, one per line, read from pyproject.toml.

The images install these in a layer of their own, keyed on pyproject.toml and the constraints only,
and then the kubetrain wheel with --no-deps on top: a change to kubetrain's sources rebuilds the
last layer (seconds) instead of reinstalling every dependency. Runs inside the image build, on the
base image's Python (3.11: tomllib), with nothing installed.

Usage: python requirements.py PYPROJECT [EXTRA[,EXTRA...]]
"""

import sys
import tomllib


def requirements(pyproject: str, extras: str) -> list[str]:
    """The core dependencies and those of every named extra, in pyproject.toml's order."""
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    found = list(project["dependencies"])
    optional = project.get("optional-dependencies", {})
    for extra in filter(None, extras.split(",")):
        if extra not in optional:
            raise SystemExit(f"requirements.py: no extra {extra!r} in {pyproject}; it has {sorted(optional)}")
        found.extend(optional[extra])
    return found


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    print("\n".join(requirements(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "")))
