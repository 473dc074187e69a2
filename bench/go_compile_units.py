"""How many Go packages the e2e tier's builds compile, and how many of them more than once.

Go's build cache keys a compiled package by its source and by what its imports compiled to, so a
package is compiled again for every piece whose module graph gives it, or anything below it,
another version. Each build script lists its pieces (`--list`: module dir, binary, package); this
asks `go list -deps -json` for each piece's packages (module downloads only, no compiling) and
counts compile units: a unit is an import path together with its module version and the units it
imports, the same identity the build cache sees. Standard-library packages are left out (built
once per toolchain and flags).

    python bench/go_compile_units.py            # every piece: control plane, node, KFP, SeaweedFS, hdrproxy, identity
    python bench/go_compile_units.py --json     # the same, as one JSON object

The counts are a static measure: they say how much compiling a cold machine does, whatever its
speed. docs/testing.md has the figures before and after the one module graph for the operators.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The build scripts, in the order .ci/run starts them: the arguments that list their pieces, and
# the -mod mode each builds with (KFP's patched tree completes its go.sum as it builds).
SCRIPTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("tools/controlplane/build.sh", ("--list", "node"), "-mod=readonly"),
    ("tools/kfp/build.sh", ("--list",), "-mod=mod"),
    ("tools/seaweedfs/build.sh", ("--list",), "-mod=readonly"),
    ("tools/hdrproxy/build.sh", ("--list",), "-mod=readonly"),
    ("tools/identity/build.sh", ("--list",), "-mod=readonly"),
)


@dataclass(frozen=True)
class Piece:
    """One binary: the module it is built in and its main package."""

    script: str
    mod_flag: str
    module_dir: Path
    binary: str
    package: str


@dataclass
class Tally:
    """Compile units over all pieces: which units exist, and per import path how many identities."""

    units: set[str] = field(default_factory=set)
    identities: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    per_piece: list[tuple[Piece, int, int]] = field(default_factory=list)


def pieces() -> list[Piece]:
    """Every piece the build scripts would build, as they list it themselves."""
    out: list[Piece] = []
    for script, args, mod_flag in SCRIPTS:
        done = subprocess.run(["bash", str(REPO / script), *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"{script} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        for line in done.stdout.splitlines():
            module_dir, binary, package = line.split("\t")
            out.append(Piece(script, mod_flag, Path(module_dir), binary, package))
    return out


def go_list(piece: Piece) -> Iterator[dict[str, Any]]:
    """`go list -deps -json` of one piece's package, in its module, without compiling anything."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": piece.mod_flag, "CGO_ENABLED": "0"}
    done = subprocess.run(
        ["go", "list", "-deps", "-json", piece.package],
        cwd=piece.module_dir,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"go list for {piece.binary} in {piece.module_dir} failed: {done.stderr.strip()[-800:]}")
    decoder = json.JSONDecoder()
    text, pos = done.stdout, 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            break
        obj, pos = decoder.raw_decode(text, pos)
        yield obj


def units_of(packages: list[dict[str, Any]]) -> dict[str, str]:
    """Import path -> compile-unit identity for one piece (its packages in dependency order)."""
    ident: dict[str, str] = {}
    for pkg in packages:  # go list -deps prints a package after everything it imports
        if pkg.get("Standard"):
            continue
        module = pkg.get("Module") or {}
        replace = module.get("Replace") or {}
        version = f"{module.get('Path', '')}@{module.get('Version', '')}"
        version += f"=>{replace.get('Path', '')}@{replace.get('Version', '')}"
        if not module.get("Version") and not replace.get("Version"):
            version += f"#{pkg.get('Dir', '')}"  # a local tree: its directory tells two copies apart
        deps = sorted(ident[i] for i in pkg.get("Imports", []) if i in ident)
        ident[pkg["ImportPath"]] = hashlib.sha256("\n".join([pkg["ImportPath"], version, *deps]).encode()).hexdigest()[
            :16
        ]
    return ident


def tally(all_pieces: Sequence[Piece]) -> Tally:
    """Compile units over the pieces, in build order: each piece's own count and what it adds."""
    t = Tally()
    for piece in all_pieces:
        ident = units_of(list(go_list(piece)))
        new = {u for u in ident.values() if u not in t.units}
        t.units |= new
        for path, unit in ident.items():
            t.identities[path].add(unit)
        t.per_piece.append((piece, len(ident), len(new)))
    return t


def report(t: Tally) -> dict[str, Any]:
    """The figures: units per piece, in all, and the import paths compiled more than once."""
    repeated = {p: len(u) for p, u in t.identities.items() if len(u) > 1}
    by_module: dict[str, int] = defaultdict(int)
    for path, count in repeated.items():
        by_module["/".join(path.split("/")[:3])] += count - 1
    return {
        "pieces": [
            {
                "binary": p.binary,
                "module": str(p.module_dir.relative_to(REPO))
                if p.module_dir.is_relative_to(REPO)
                else p.module_dir.name,
                "packages": n,
                "new_units": new,
            }
            for p, n, new in t.per_piece
        ],
        "compile_units": len(t.units),
        "import_paths": len(t.identities),
        "import_paths_compiled_more_than_once": len(repeated),
        "extra_compiles": sum(c - 1 for c in repeated.values()),
        "extra_compiles_by_module_prefix": dict(sorted(by_module.items(), key=lambda kv: -kv[1])[:15]),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the compile-unit table (or JSON) for every piece the build scripts list."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args(argv)
    result = report(tally(pieces()))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print("| piece | module | packages | compile units it adds |\n|---|---|---:|---:|")
    for row in result["pieces"]:
        print(f"| {row['binary']} | {row['module']} | {row['packages']:,} | {row['new_units']:,} |")
    print(
        f"\ncompile units in all: {result['compile_units']:,} for {result['import_paths']:,} import paths; "
        f"{result['import_paths_compiled_more_than_once']:,} paths compiled more than once "
        f"({result['extra_compiles']:,} extra compiles)"
    )
    by_prefix = result["extra_compiles_by_module_prefix"].items()
    print("extra compiles by module prefix:", ", ".join(f"{k} {v}" for k, v in by_prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
