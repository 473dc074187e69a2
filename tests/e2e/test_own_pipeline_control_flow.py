"""A user's pipeline with control flow, and one whose only step fails, under the real kfp.local.

`kubetrain run FILE --json` in this process, on pipelines of small Python components (no training):
a `dsl.If`/`Else` whose taken branch runs and whose other branch is SKIPPED, a `dsl.ParallelFor`
reported per iteration, the run SUCCEEDED with exit 0; and a step without output artifacts that
fails alone (kfp.local then makes no directory at all) reported FAILED with its last line.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FLOW = """
from kfp import dsl


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def pick(x: int) -> int:
    return x


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def say(msg: str) -> str:
    print("saying", msg)
    return msg


@dsl.pipeline(name="flow")
def flow(x: int = 1):
    picked = pick(x=x)
    with dsl.If(picked.output == 1):
        say(msg="one")
    with dsl.Else():
        say(msg="other")
    with dsl.ParallelFor([10, 20]) as item:
        say(msg="loop")
"""

FAILS_ALONE = """
from kfp import dsl


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def check(limit: int):
    import sys

    print(f"check: {limit} is over the limit")
    sys.exit(3)


@dsl.pipeline(name="fails-alone")
def fails_alone(limit: int = 1):
    check(limit=limit)
"""


def _run(
    tmp_path: Path, source: str, capsys: pytest.CaptureFixture[str], *params: str
) -> tuple[int, dict[str, Any], str]:
    path = tmp_path / "user_pipeline.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    args = ["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--json"]
    code = main([*args, *(f"--param={p}" for p in params)])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err


@pytest.mark.parametrize(("x", "taken", "left_out", "said"), [(1, "say", "say-2", "one"), (2, "say-2", "say", "other")])
def test_a_branch_left_out_is_skipped_and_the_run_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], x: int, taken: str, left_out: str, said: str
) -> None:
    code, outcome, summary = _run(tmp_path, FLOW, capsys, f"x={x}")
    assert (code, outcome["state"], outcome["exit_code"]) == (0, "SUCCEEDED", 0), summary
    tasks = outcome["tasks"]
    assert tasks["pick"]["state"] == "SUCCEEDED"
    assert tasks[taken]["state"] == "SUCCEEDED"
    assert tasks[taken]["parameters"] == {"Output": said}
    assert (tasks[left_out]["state"], tasks[left_out]["exit_code"], tasks[left_out]["error"]) == ("SKIPPED", None, None)
    loop = sorted(name for name in tasks if name.startswith("say-3"))
    assert loop == ["say-3[0]", "say-3[1]"]
    assert all(tasks[name]["state"] == "SUCCEEDED" for name in loop)
    assert f"task {left_out}: SKIPPED" in summary
    assert "pipeline flow: SUCCEEDED" in summary


def test_a_step_without_outputs_that_fails_alone_is_reported_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, outcome, summary = _run(tmp_path, FAILS_ALONE, capsys)
    # kfp.local keeps no step's exit code (its SubprocessRunner reports success or failure only): 1.
    assert (code, outcome["state"], outcome["exit_code"]) == (ExitCode.JOB_FAILED, "FAILED", 1)
    assert outcome["tasks"]["check"]["state"] == "FAILED"
    assert outcome["tasks"]["check"]["error"] == "check: 1 is over the limit"
    assert "task check: FAILED\n    error: check: 1 is over the limit (exit code 1)" in summary


LOOP_TRAINING = """
from kfp import dsl

from kubetrain.components import download_dataset, pytorch_train


@dsl.pipeline(name="loop-training")
def loop_training():
    data = download_dataset(source="builtin:digits")
    with dsl.ParallelFor([1, 1]) as epochs:
        pytorch_train(dataset=data.outputs["dataset"], workers=0, epochs=epochs)
"""


@pytest.mark.timeout(300)
def test_a_parallel_for_over_pytorch_train_without_placeholders_runs_one_job_per_iteration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two iterations of one task, alike in every input: only the identity each step reads from its
    # output URI (kfp.local's for-loop-N-iteration-I directory) tells their jobs apart.
    code, outcome, summary = _run(tmp_path, LOOP_TRAINING, capsys)
    assert (code, outcome["state"]) == (0, "SUCCEEDED"), summary
    loop = sorted(name for name in outcome["tasks"] if name.startswith("pytorch-train"))
    assert loop == ["pytorch-train[0]", "pytorch-train[1]"], sorted(outcome["tasks"])
    jobs = {outcome["tasks"][name]["parameters"]["job_name"] for name in loop}
    assert len(jobs) == 2, jobs
