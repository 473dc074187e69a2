"""Regenerate the checked-in gRPC/protobuf modules from `kubetrain_ps.proto`.

Run ``python -m kubetrain.ps.proto.generate`` (needs grpcio-tools). The proto is compiled with
``-I src`` so the generated modules import each other as ``kubetrain.ps.proto.*``. The output
depends only on the proto and the grpcio-tools version, so regenerating is reproducible; the
unit tests compare a fresh generation with the checked-in files.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from kubetrain.errors import TrainingError

PROTO_DIR = Path(__file__).resolve().parent
SRC_ROOT = PROTO_DIR.parents[2]  # .../src
PROTO_FILE = PROTO_DIR / "kubetrain_ps.proto"
GENERATED = ("kubetrain_ps_pb2.py", "kubetrain_ps_pb2_grpc.py")


def generate(out_root: Path) -> list[Path]:
    """Compile the proto into `out_root` (laid out like `src/`); return the generated files."""
    from grpc_tools import protoc  # a dev dependency: only needed to regenerate

    rel = PROTO_FILE.relative_to(SRC_ROOT)
    include = str(Path(protoc.__file__).parent / "_proto")  # google/protobuf/*.proto
    args = [
        "grpc_tools.protoc",
        f"-I{SRC_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        str(rel),
    ]
    code = protoc.main(args)
    if code != 0:
        raise TrainingError(f"protoc failed with exit code {code} on {PROTO_FILE}")
    out_dir = out_root / rel.parent
    return [out_dir / name for name in GENERATED]


def main(argv: list[str] | None = None) -> int:
    """Regenerate into the source tree (or `--out DIR`, laid out like `src/`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="output root (default: src/)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        # protoc resolves the proto relative to -I, so run from the source root.
        files = generate(Path(tmp))
        target_root = args.out if args.out is not None else SRC_ROOT
        target_dir = target_root / PROTO_FILE.relative_to(SRC_ROOT).parent
        target_dir.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copyfile(f, target_dir / f.name)
            print(f"wrote {target_dir / f.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
