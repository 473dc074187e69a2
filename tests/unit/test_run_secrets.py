"""`kubetrain run` (and `--dry-run`, and any `--json` error) keeps a URL's secrets out of what it prints and stores.

A pipeline parameter holding a presigned URL reaches kfp's executor (which prints every parameter),
the step (which may print it, return it, or fail naming it), the run's `arguments`, `--json`,
`outcome.json` and `run.log`. The run is real (kfp.local, one step as a process); every one of
those is scanned for the planted secrets.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from kubetrain.tooling.local_runs import OUTCOME_FILE
from kubetrain.tooling.progress import RUN_LOG, RunLog

SOURCE = "https://data.example/x.npz?X-Amz-Expires=60&X-Amz-Signature=planted-sig&jwt=planted-jwt"

PIPELINE = """
from kfp import dsl


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def echo(source: str, fail: bool) -> str:
    print("fetching", source)
    if fail:
        raise ValueError(f"cannot open {source}")
    return source


@dsl.pipeline(name="echo-source")
def echo_source(source: str, fail: bool = False) -> None:
    echo(source=source, fail=fail)
"""


@pytest.mark.parametrize("fail", [False, True], ids=["succeeds", "fails"])
def test_a_presigned_url_parameter_is_redacted_in_the_json_the_outcome_and_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fail: bool
) -> None:
    pipeline = tmp_path / "echo_source.py"
    pipeline.write_text(PIPELINE, encoding="utf-8")
    argv = ["run", str(pipeline), "--param", f"source={SOURCE}", "--param", f"fail={fail}"]
    code = main([*argv, "--json", "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    (run_dir,) = (tmp_path / "runs").iterdir()
    log = (run_dir / RUN_LOG).read_text(encoding="utf-8")
    stored = (run_dir / OUTCOME_FILE).read_text(encoding="utf-8")
    for where, text in {"stdout": out, "stderr": err, RUN_LOG: log, OUTCOME_FILE: stored}.items():
        assert "planted" not in text, f"a secret in {where}: {text[-2000:]}"
    outcome = json.loads(out.splitlines()[-1])
    shown = "https://data.example/x.npz?X-Amz-Expires=60&X-Amz-Signature=REDACTED&jwt=REDACTED"
    assert outcome["arguments"]["source"] == shown
    assert "Got executor_input" in log and "fetching https://data.example/x.npz?" in log  # the log keeps its lines
    task = outcome["tasks"]["echo"]
    if fail:
        assert code == ExitCode.JOB_FAILED and task["state"] == "FAILED"
        assert task["error"] == f"ValueError: cannot open {shown}"
    else:
        assert code == ExitCode.SUCCESS and task["parameters"] == {"Output": shown}


def test_a_dry_run_prints_the_arguments_redacted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = tmp_path / "echo_source.py"
    pipeline.write_text(PIPELINE, encoding="utf-8")
    argv = ["run", str(pipeline), "--param", f"source={SOURCE}", "--dry-run", "--json"]
    assert main([*argv, "--runs-dir", str(tmp_path / "runs")]) == ExitCode.SUCCESS
    out, err = capsys.readouterr()
    assert "planted" not in out + err
    assert json.loads(out.splitlines()[-1])["arguments"]["source"].endswith("X-Amz-Signature=REDACTED&jwt=REDACTED")


def test_the_json_error_object_is_redacted_like_the_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    # A URL given where a file is expected: OSError spells it `https:/...` in the message.
    code = main(["launch", "-f", SOURCE, "--local", "--json"])
    out, err = capsys.readouterr()
    assert code == ExitCode.INVALID_INPUT
    assert "planted" not in out + err, out + err
    assert json.loads(out)["error"].startswith("cannot read manifest https://data.example/x.npz?X-Amz-Expires=60&")


def test_a_url_split_between_two_writes_is_redacted_whole_in_the_log_and_on_the_console() -> None:
    log, console = io.StringIO(), io.StringIO()
    stream = RunLog(log, console, verbose=True)
    middle = SOURCE.index("planted-sig") + 4
    stream.write(f"fetching {SOURCE[:middle]}")
    stream.flush()  # print(..., end="", flush=True): the line is not complete yet
    stream.write(f"{SOURCE[middle:]}\nno newline at the end: {SOURCE}")
    stream.finish()
    for text in (log.getvalue(), console.getvalue()):
        assert "planted" not in text, text
        assert text.count("X-Amz-Signature=REDACTED") == 2 and text.endswith("jwt=REDACTED\n")
