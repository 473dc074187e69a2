"""`kubetrain compile [--check] [--registry HOST/PATH --out DIR]`: regenerate the component and pipeline YAML.

Each component in components/ and each pipeline in pipelines/ compiles to a YAML file next to its
source. `--check` compiles afresh and fails (exit 1) when a committed file differs, ignoring the
SDK version line; it prints the differences and the command that fixes them.

`--registry HOST/PATH --out DIR` writes them all to DIR/components and DIR/pipelines (each with
its kfp-pre-2.15/ copy) for images published to that registry (images/build.sh --push with
REGISTRY=HOST/PATH): the same as compiling with KUBETRAIN_REGISTRY=HOST/PATH set.

Writing beside the sources is for a kubetrain checkout: where kubetrain is installed (pip), the
YAML beside its modules is the package's own, so compile refuses to run there without --out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubetrain.tooling.catalog import COMPONENTS, PIPELINES, entries

# `--check` found stale files: the conventional "differences found" status of diff-like tools.
EXIT_STALE = 1
_DIFF_LINES = 60


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `compile` subcommand."""
    parser = subparsers.add_parser(
        "compile",
        help="regenerate the YAML of kubetrain's own components and pipelines (for kubetrain's developers)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="fail when a committed YAML is not what a compile gives")
    parser.add_argument(
        "--registry",
        metavar="HOST/PATH",
        help="the registry kubetrain's images are pulled from (default: KUBETRAIN_REGISTRY, else ghcr.io/kubetrain)",
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="write the YAML under DIR instead of beside the sources"
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"only these (default all): {', '.join((*COMPONENTS, *PIPELINES))}",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compile or check; returns 0, or 1 when --check found stale files."""
    from kubetrain.commands.run import prepare_directory
    from kubetrain.errors import InvalidInputError
    from kubetrain.presets import DEFAULT_REGISTRY, IMAGE_REGISTRY, REGISTRY_ENV, registry_from
    from kubetrain.tooling.compiling import check_all, compile_all
    from kubetrain.tooling.hub import in_checkout, repo_root, stale_hub, write_hub

    try:
        wanted = IMAGE_REGISTRY if args.registry is None else registry_from({REGISTRY_ENV: args.registry})
    except InvalidInputError as e:
        raise InvalidInputError(str(e).replace(f"{REGISTRY_ENV}:", "--registry:", 1)) from e
    if wanted != IMAGE_REGISTRY:
        # The registry is read when the components are defined (on import): compile in a fresh interpreter.
        return _recompile(args, registry=args.registry)
    if IMAGE_REGISTRY != DEFAULT_REGISTRY and args.out is None:
        raise InvalidInputError(
            f"{REGISTRY_ENV}={IMAGE_REGISTRY}: the YAML beside the sources names {DEFAULT_REGISTRY}; "
            "write YAML for another registry elsewhere: kubetrain compile --registry HOST/PATH --out DIR"
        )
    if args.check and args.out is not None:
        raise InvalidInputError("--check: compares the YAML beside the sources; leave --out out")
    if args.out is None and not in_checkout():
        # The YAML beside an installed package's sources is the package's own: never rewritten in place.
        raise InvalidInputError(
            f"kubetrain is installed here ({repo_root()}), not a checkout: its compiled YAML ships with it "
            "(kubetrain.components.compiled_yaml()); write YAML of your own with --out DIR "
            "(and --registry HOST/PATH), or run `kubetrain compile` in a kubetrain checkout"
        )
    if args.out is not None:
        prepare_directory(args.out, "--out")
    selected = entries()
    if args.names:
        unknown = sorted(set(args.names) - {e.name for e in selected})
        if unknown:
            raise InvalidInputError(f"unknown names {unknown}; expected some of {[e.name for e in selected]}")
        selected = [e for e in selected if e.name in args.names]
    hub_names = [e.name for e in selected if e.kind == "component"]
    if not args.check:
        try:
            written = compile_all(selected, out=args.out)
        except OSError as e:
            where = f"--out {args.out}" if args.out is not None else "the YAML beside the sources"
            raise InvalidInputError(f"{where}: cannot write {e.filename} ({e.strerror}); choose another") from e
        for path in written:
            print(f"wrote {path}")
        if args.out is None:  # the hub's files describe the sources' YAML
            for path in write_hub(hub_names):
                print(f"wrote {path}")
        return 0
    stale_files = stale_hub(hub_names)
    for path in stale_files:
        print(f"{path} is stale (generated from the component, its metadata and the pins)", file=sys.stderr)
    stale = check_all(selected)
    for item in stale:
        lines = item.diff.splitlines()
        print(f"{item.entry.kind} {item.entry.name}: {item.path or item.entry.yaml_path} is stale", file=sys.stderr)
        print("\n".join(lines[:_DIFF_LINES]), file=sys.stderr)
        if len(lines) > _DIFF_LINES:
            print(f"... ({len(lines) - _DIFF_LINES} more diff lines)", file=sys.stderr)
    if stale or stale_files:
        count = len(stale) + len(stale_files)
        print(f"{count} stale file(s); run `kubetrain compile` (or `make compile`) and commit", file=sys.stderr)
        return EXIT_STALE
    print(f"all {len(selected)} compiled YAML files are current")
    return 0


def _recompile(args: argparse.Namespace, *, registry: str) -> int:
    """`kubetrain compile` again in a new interpreter with KUBETRAIN_REGISTRY set; its exit status."""
    from kubetrain.errors import InvalidInputError
    from kubetrain.presets import REGISTRY_ENV

    if args.out is None:
        raise InvalidInputError(f"--registry {registry}: needs --out DIR (the YAML beside the sources stays as is)")
    command = [sys.executable, "-m", "kubetrain", "compile", "--out", str(args.out), *args.names]
    return subprocess.run(command, env={**os.environ, REGISTRY_ENV: registry}, check=False).returncode
