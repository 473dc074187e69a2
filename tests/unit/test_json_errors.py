"""Every `--json` command ends stdout with one JSON object, errors found before the run included (issue 34)."""

from __future__ import annotations

import json
import socket

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode


def _last_object(out: str) -> dict[str, object]:
    lines = out.strip().splitlines()
    assert lines, "stdout is empty"
    obj = json.loads(lines[-1])
    assert isinstance(obj, dict)
    return obj


def test_run_with_a_bad_parameter_ends_with_a_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "mnist_pytorch", "--param", "no_such_input=1", "--json"])
    out = _last_object(capsys.readouterr().out)
    assert code == ExitCode.INVALID_INPUT
    assert out["state"] == "FAILED" and out["exit_code"] == ExitCode.INVALID_INPUT
    assert "no_such_input" in str(out["error"])


def test_a_refused_command_line_with_json_ends_with_a_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--json"])  # PIPELINE missing: argparse refuses it
    captured = capsys.readouterr()
    out = _last_object(captured.out)
    assert code == ExitCode.INVALID_INPUT
    assert out["error_type"] == "UsageError" and "PIPELINE" in str(out["error"])
    assert "the following arguments are required: PIPELINE" in captured.err


def test_submit_to_a_dead_host_with_json_ends_with_a_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["submit", "mnist_pytorch", "--host", f"http://127.0.0.1:{port}", "--json"])
    out = _last_object(capsys.readouterr().out)
    assert code == ExitCode.INFRASTRUCTURE == out["exit_code"]
    assert "cannot reach the KFP API" in str(out["error"])
