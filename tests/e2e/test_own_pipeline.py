"""docs/own-pipeline.md, executed: a user's own pipeline file, outside the package, run and submitted.

The recipe's pipeline is taken from the document as it is and written to a fresh directory, as
a user would save it. Then, with the real CLI in a subprocess, as in the document: its
parameters listed; `kubetrain run my_pipeline.py` (real training on the local backend; the
default output inspected line by line); `python my_pipeline.py` to compile it and `kubetrain run
my_training.yaml` with a threshold the model cannot reach, so the user's own component fails and
the summary says why; `kubetrain submit` of both files to the stand-in KFP API.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubetrain.errors import ExitCode
from tests.fake_kfp_api import FakeKfpApi

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "docs" / "own-pipeline.md"
TOKEN = "own-pipeline-token"
# What kfp.local prints that a user has no use for on this machine: in run.log only.
NOISE = ("executor_input", "[KFP Executor", "Warning", "non-Python base image", "no effect", "Streamed logs", "-----")


def recipe_file(directory: Path) -> Path:
    """The document's my_pipeline.py, saved in `directory`."""
    match = re.search(r"<!-- my_pipeline\.py -->\n```python\n(.*?)```", RECIPE.read_text(encoding="utf-8"), re.S)
    assert match, f"{RECIPE} lost its my_pipeline.py block"
    path = directory / "my_pipeline.py"
    path.write_text(match.group(1), encoding="utf-8")
    return path


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubetrain ARGS` (or `python ARGS` when args[0] is a .py) in `cwd`, as a user runs it."""
    command = [sys.executable, *args] if args[0].endswith(".py") else [sys.executable, "-m", "kubetrain", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HOME": str(cwd)}
    env.pop("KUBETRAIN_KFP_TOKEN", None)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=500, check=False)


def test_own_pipeline_recipe(tmp_path: Path) -> None:
    user = tmp_path / "my-project"
    user.mkdir()
    source = recipe_file(user)
    assert not str(source).startswith(str(REPO))

    listed = cli(user, "run", "my_pipeline.py", "--list-params")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1:5] == [  # in name order, as the compiled YAML lists them too
        "claim             String   'kubetrain-workspace'  ReadWriteMany PersistentVolumeClaim shared by the steps and "
        "the training pods.",
        "dataset           String   'builtin:digits'       builtin:digits (no network), or a URL of MNIST-format files.",
        "epochs            Integer  3                      Training epochs.",
        "minimum_accuracy  Float    0.8                    The run fails below this test accuracy.",
    ]

    # Run it, default output: the steps' progress and the summary, nothing of kfp.local's dumps.
    ran = cli(user, "run", "my_pipeline.py", "--param", "epochs=4")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    assert not [line for line in lines if any(noise in line for noise in NOISE)]
    assert ran.stderr == ""
    assert [line for line in lines if line.startswith("step ")] == [
        "step download-dataset: running", "step download-dataset: done",
        "step pytorch-train: running", "step pytorch-train: done",
        "step check-accuracy: running", "step check-accuracy: done",
    ]  # fmt: skip
    assert any("epoch 3: loss" in line for line in lines)  # the training's own progress is shown
    summary = lines[lines.index(next(line for line in lines if line.startswith("pipeline my_training: "))) :]
    assert summary[0].startswith("pipeline my_training: SUCCEEDED in ")
    run_dir = Path(summary[1].removeprefix("  run directory: "))
    assert run_dir.parent == user / "runs"
    assert summary[2] == f"  full log: {run_dir / 'run.log'}"
    assert "Got executor_input" in (run_dir / "run.log").read_text(encoding="utf-8")  # kept, not shown
    assert (run_dir / "reports" / "pytorch-train-report.html").is_file()
    assert "  task check-accuracy: SUCCEEDED" in summary
    assert len(lines) < 60, ran.stdout  # was 233 for the same run, 153 of them executor inputs

    # Compiled, the YAML runs the same way; the user's own component fails and the summary says why.
    assert cli(user, "my_pipeline.py").returncode == 0
    assert (user / "my_training.yaml").is_file()
    failed = cli(user, "run", "my_training.yaml", "--param", "epochs=1", "--param", "minimum_accuracy=0.999",
                 "--json")  # fmt: skip
    assert failed.returncode == ExitCode.JOB_FAILED, failed.stderr[-3000:]
    outcome = json.loads(failed.stdout)
    assert outcome["pipeline"] == "my_training"
    assert outcome["state"] == "FAILED"
    assert outcome["exit_code"] == 1
    check = outcome["tasks"]["check-accuracy"]
    assert check["state"] == "FAILED"
    assert check["exit_code"] == 1
    assert re.fullmatch(r"ValueError: test accuracy 0\.\d{3} is below 0\.999", check["error"]), check
    assert f"error: {check['error']} (exit code 1)" in failed.stderr
    assert outcome["tasks"]["pytorch-train"]["state"] == "SUCCEEDED"

    # Submitted, from the source and from the YAML, to the stand-in KFP API.
    with FakeKfpApi(token=TOKEN) as api:
        from_source = cli(user, "submit", "my_pipeline.py", "--host", api.url, "--token", TOKEN,
                          "--param", "epochs=20")  # fmt: skip
        assert from_source.returncode == 0, from_source.stderr
        from_yaml = cli(user, "submit", "my_training.yaml", "--host", api.url, "--token", TOKEN)
        assert from_yaml.returncode == 0, from_yaml.stderr
    (pipeline,) = api.state.pipelines.values()
    assert pipeline["display_name"] == "my-training"
    first, second = api.state.versions[pipeline["pipeline_id"]]
    compiled = next(iter(yaml.safe_load_all((user / "my_training.yaml").read_text())))
    assert api.state.specs[first["pipeline_version_id"]]["root"] == compiled["root"]
    assert api.state.specs[second["pipeline_version_id"]] == compiled
    runs = list(api.state.runs.values())
    assert [r["runtime_config"]["parameters"] for r in runs] == [{"epochs": 20}, {}]
    assert f"{api.url}/#/runs/details/{runs[0]['run_id']}" in from_source.stdout
