"""`kubetrain render`: valid manifests out, bad flags refused with the message and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kubetrain.cli import main
from tests.crd_schema import validate_strict


def test_json_output_is_the_same_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "mpijob", "--name", "m", "--workers", "2", "-o", "json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    validate_strict(manifest)
    assert manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pytorchjob", "--name", "Bad_Name"], "name: got 'Bad_Name'; expected a DNS-1035 label"),
        (["mpijob", "--name", "m", "--workers", "-1"], "--workers: got -1; expected an integer ≥ 0"),
        (["pytorchjob", "--name", "p", "--elastic", "4:1"], "elastic.min_replicas: got 4"),
        (["pytorchjob", "--name", "p", "--elastic", "x"], "expected MIN:MAX"),
        (["psjob", "--name", "p", "--ps", "0"], "ps.replicas: got 0"),
        (["pytorchjob", "--name", "p", "--cpu", "lots"], "resources.cpu: got 'lots'"),
        (["mpijob", "--name", "m", "--elastic", "1:2"], "--elastic"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(argv: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kubetrain", "render", *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
