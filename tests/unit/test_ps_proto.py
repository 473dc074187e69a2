"""The checked-in gRPC modules are exactly what the proto generates, and they import."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from kubetrain.ps.proto import generate


def _generated_version() -> str:
    text = (generate.PROTO_DIR / "kubetrain_ps_pb2_grpc.py").read_text()
    for line in text.splitlines():
        if line.startswith("GRPC_GENERATED_VERSION"):
            return line.split("=", 1)[1].strip().strip("'\"")
    raise AssertionError("no GRPC_GENERATED_VERSION in the checked-in module")


def test_regenerating_gives_identical_files(tmp_path: Path) -> None:
    from importlib.metadata import version

    tools = version("grpcio-tools")
    if tools != _generated_version():
        pytest.skip(f"grpcio-tools {tools} installed; the checked-in code came from {_generated_version()}")
    assert generate.main(["--out", str(tmp_path)]) == 0
    for name in generate.GENERATED:
        fresh = tmp_path / "kubetrain" / "ps" / "proto" / name
        assert filecmp.cmp(fresh, generate.PROTO_DIR / name, shallow=False), (
            f"{name} is stale: run `python -m kubetrain.ps.proto.generate`"
        )


def test_generated_modules_describe_both_services() -> None:
    from kubetrain.ps.proto import kubetrain_ps_pb2 as pb

    services = pb.DESCRIPTOR.services_by_name
    assert set(services) == {"ParameterServer", "Master"}
    assert {m.name for m in services["Master"].methods} == {"GetJobInfo", "GetTask", "ReportTask", "Heartbeat"}
    assert {"Pull", "Push", "InitModel", "Flush", "DumpModel", "GetState", "Shutdown"} == {
        m.name for m in services["ParameterServer"].methods
    }


def test_master_and_server_do_not_import_torch() -> None:
    # The master and the shards run in light pods: only workers need torch.
    import subprocess
    import sys

    code = "import sys, kubetrain.ps.master, kubetrain.ps.server; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
