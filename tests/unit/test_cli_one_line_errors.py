"""Inputs that used to end in a traceback (or render a job no cluster can run) end in one line, exit 2.

Each case runs the real command line in-process; nothing may escape `main`, and the last line on
stderr names the flag or input, the value and what is expected.
"""

from __future__ import annotations

import json
import math
import traceback
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode, SpecError
from kubetrain.manifests.patch import MAX_JSON_DEPTH
from kubetrain.presets import TrainingParams
from kubetrain.specs import MAX_REPLICAS, JobMeta, ReplicaSpec


def fails_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run `kubetrain ARGV`: exit 2 (argparse's usage line allowed), no traceback; the error line."""
    escaped = ""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own exit for a bad flag value
        code = e.code  # type: ignore[assignment]
    except BaseException as e:  # noqa: BLE001 - any escape is the bug under test: show it
        escaped = "".join(traceback.format_exception(e))
        code = -1
    captured = capsys.readouterr()
    assert escaped == "", escaped
    assert code == ExitCode.INVALID_INPUT, captured.err
    *usage, line = captured.err.strip().splitlines()
    # argparse prints its (multi-line) usage before its error line; anything else is one line.
    assert all(u.startswith(("usage:", " ")) for u in usage), captured.err
    assert "Traceback" not in captured.err
    return line


RENDER = ["render", "pytorchjob", "--name", "job"]


@pytest.mark.parametrize("value", ["inf", "nan", "-5", "-inf"])
def test_a_timeout_that_is_not_a_finite_positive_number(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_in_one_line([*RENDER, f"--timeout-seconds={value}"], capsys)
    assert f"timeout_seconds: got {float(value)!r}; expected a positive number of seconds" in line


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_a_learning_rate_that_is_not_finite(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_in_one_line([*RENDER, "--lr", value], capsys)
    assert f"learning_rate: got {float(value)!r}; expected a finite number > 0" in line


def test_an_at_file_that_is_missing_or_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent"
    line = fails_in_one_line([*RENDER, "--labels", f"@{missing}"], capsys)
    assert line.endswith(f"argument --labels: @{missing}: {missing} does not exist; expected a file holding JSON")
    line = fails_in_one_line([*RENDER, "--labels", f"@{tmp_path}"], capsys)
    assert line.endswith(f"argument --labels: @{tmp_path}: {tmp_path} is a directory; expected a file holding JSON")


@pytest.mark.parametrize("depth", [3000, MAX_JSON_DEPTH + 1])
def test_a_manifest_patch_nested_too_deep(depth: int, capsys: pytest.CaptureFixture[str]) -> None:
    patch = '{"a": ' * depth + "1" + "}" * depth
    line = fails_in_one_line([*RENDER, "--manifest-patch", patch], capsys)
    assert "argument --manifest-patch: got JSON nested" in line
    assert f"expected at most {MAX_JSON_DEPTH} levels of lists and objects" in line
    assert len(line) < 300  # the value is not echoed


def test_a_manifest_patch_at_the_depth_limit_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    patch = {"metadata": {"annotations": {"note": "ok"}}}
    assert main([*RENDER, "--manifest-patch", json.dumps(patch), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["annotations"]["note"] == "ok"


def test_a_namespace_longer_than_63_characters(capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_in_one_line([*RENDER, "--namespace", "n" * 64], capsys)
    assert f"namespace: got {'n' * 64!r}; expected the name of a namespace (≤ 63" in line
    assert main([*RENDER, "--namespace", "n" * 63]) == 0


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["render", "pytorchjob", "--name", "job", "--workers", "100000000"], "workers"),
        (["render", "mpijob", "--name", "job", "--workers", str(MAX_REPLICAS + 1)], "workers"),
        (["render", "psjob", "--name", "job", "--ps", "100000000"], "ps_replicas"),
        (["render", "pytorchjob", "--name", "job", "--elastic", "1:100000000"], "elastic_max_workers"),
    ],
)
def test_replica_counts_are_capped(argv: list[str], name: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = fails_in_one_line(argv, capsys)
    assert f"{name}: got {int(line.split('got ')[1].split(';')[0])}; expected at most {MAX_REPLICAS}" in line


def test_the_specs_refuse_the_same_values() -> None:
    with pytest.raises(SpecError, match="replicas: got 10001; expected an integer from 0 to 10000"):
        ReplicaSpec(image="img:1", replicas=MAX_REPLICAS + 1)
    assert ReplicaSpec(image="img:1", replicas=MAX_REPLICAS).replicas == MAX_REPLICAS
    with pytest.raises(SpecError, match=r"namespace: got 'nnn"):
        JobMeta(name="job", namespace="n" * 64)
    with pytest.raises(SpecError, match=r"namespace: got 'a\.b'"):
        JobMeta(name="job", namespace="a.b")
    for lr in (math.inf, math.nan):
        with pytest.raises(SpecError, match=r"lr: got .*; expected a finite learning rate > 0"):
            TrainingParams(lr=lr)


def test_run_with_a_runs_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "runs"
    a_file.write_text("x")
    line = fails_in_one_line(["run", "mnist_pytorch", "--runs-dir", str(a_file)], capsys)
    assert line == f"kubetrain run: --runs-dir {a_file}: {a_file} is a file, not a directory; choose another"
    assert a_file.read_text() == "x"


def test_run_of_a_yaml_file_that_does_not_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipelineInfo:\n  name: [x, y\nroot: : z\n")
    line = fails_in_one_line(["run", str(bad)], capsys)
    assert line.startswith(f"kubetrain run: pipeline: {bad}, line 3, column 5: not valid YAML (")


DEEP_PIPELINE = """
from pathlib import Path
from kfp import dsl
import kubetrain.components
ps_train = kubetrain.components.load_component(str(kubetrain.components.compiled_yaml()["ps_train"]))
download = kubetrain.components.load_component(str(kubetrain.components.compiled_yaml()["download_dataset"]))

@dsl.pipeline(name="deep-patch")
def deep_patch(patch: dict = {}):
    ps_train(dataset=download().outputs["dataset"], manifest_patch=patch)
"""


@pytest.mark.parametrize("depth", [3000, MAX_JSON_DEPTH + 16])
def test_a_manifest_patch_input_nested_too_deep_in_run(
    depth: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The components' manifest_patch input through `kubetrain run`: 3,000 levels used to end in a
    # RecursionError traceback, 80 in a protobuf DecodeError traceback once the task started.
    pipeline = tmp_path / "deep.py"
    pipeline.write_text(DEEP_PIPELINE)
    patch = '{"spec": ' + '{"a": ' * depth + "1" + "}" * depth + "}"
    argv = ["run", str(pipeline), "--param", f"patch={patch}", "--runs-dir", str(tmp_path / "runs")]
    line = fails_in_one_line(argv, capsys)
    assert "--param patch: got JSON nested" in line, line
    assert f"expected at most {MAX_JSON_DEPTH} levels of lists and objects" in line
    assert len(line) < 300  # the value is not echoed
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing ran
