"""`kubetrain run` on pipelines with control flow: every step is found, a branch left out is SKIPPED.

kfp.local runs the steps of `dsl.If`/`Else`, `dsl.ParallelFor` and nested pipelines in sub-DAGs
(iteration i of a loop under `<loop>-iteration-<i>/`); the outcome walks them all. The real
kfp.local runs are in tests/e2e/test_own_pipeline_control_flow.py.
"""

# No `from __future__ import annotations`: kfp reads the components' annotations as types.
import functools
import io
import json
import logging
from pathlib import Path

from kfp import dsl

from kubetrain.tooling.outcome import DagTask, collect_tasks, dag_tasks, instances
from kubetrain.tooling.progress import RunLog, RunLogHandler


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def pick(x: int) -> int:
    """Return x."""
    return x


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def say(msg: str) -> str:
    """Return msg."""
    return msg


@dsl.pipeline(name="inner")
def inner(msg: str) -> None:
    """A nested pipeline."""
    say(msg=msg)


@dsl.pipeline(name="flow")
def flow(x: int = 1) -> None:
    """If/Else, a ParallelFor with an If inside, a nested pipeline."""
    picked = pick(x=x)
    with dsl.If(picked.output == 1):
        say(msg="one")
    with dsl.Else():
        say(msg="other")
    with dsl.ParallelFor([1, 2]) as item, dsl.If(item == 2):
        say(msg="two")
    inner(msg="nested")


def _by_name(tasks: list[DagTask]) -> dict[str, DagTask]:
    return {t.name: t for t in tasks}


def test_the_walk_reports_the_steps_inside_branches_loops_and_nested_pipelines() -> None:
    tasks = dag_tasks(flow)
    # Reported by the names kfp.local logs them by (their components'), unique where task names are not.
    found = {t.directory: t for t in tasks}
    assert len(found) == len(tasks) == 5  # the steps only: no group (condition-*, for-loop-*)
    order = [t.directory for t in tasks]
    if_branch, else_branch = found["say-2"], found["say-2-2"]
    assert order.index("pick") < order.index("say-2") and order.index("pick") < order.index("say-2-2")
    assert if_branch.name == "say" and if_branch.conditions == ("condition-2",)
    assert else_branch.conditions == ("condition-3",)
    assert if_branch.loops == else_branch.loops == ()
    in_loop = found["say-3"]
    assert len(in_loop.loops) == 1 and in_loop.loops[0].startswith("for-loop-")
    assert len(in_loop.conditions) == 1
    nested = found["say"]  # the nested pipeline's step, also a task "say" in its own DAG
    assert (nested.name, nested.conditions, nested.loops) == ("say", (), ())


def _succeeded(directory: Path, output: str) -> None:
    directory.mkdir(parents=True)
    (directory / "executor_output.json").write_text(json.dumps({"parameterValues": {"Output": output}}))


def test_each_loop_iteration_is_a_task_of_its_own(tmp_path: Path) -> None:
    loop = DagTask("say", "comp-say", {}, loops=("for-loop-2",))
    for i in (0, 1, 10):  # in numeric order, not the directory listing's
        _succeeded(tmp_path / f"for-loop-2-iteration-{i}" / "say", f"#{i}")
    assert instances(loop, tmp_path) == [
        ("say[0]", tmp_path / "for-loop-2-iteration-0"),
        ("say[1]", tmp_path / "for-loop-2-iteration-1"),
        ("say[10]", tmp_path / "for-loop-2-iteration-10"),
    ]
    outcomes = collect_tasks(
        [loop], tmp_path, tmp_path / "reports", last_lines={}, started={"say"}, skipped_groups=set(),
        pipeline_succeeded=True,
    )  # fmt: skip
    assert [(t.name, t.state, t.parameters["Output"]) for t in outcomes] == [
        ("say[0]", "SUCCEEDED", "#0"), ("say[1]", "SUCCEEDED", "#1"), ("say[10]", "SUCCEEDED", "#10"),
    ]  # fmt: skip
    # A loop that never ran leaves one task, without a directory.
    assert instances(DagTask("x", "comp-x", {}, loops=("for-loop-9",)), tmp_path) == [("x", tmp_path / "for-loop-9")]


def test_a_branch_left_out_is_skipped_and_the_run_is_not_failed_by_it(tmp_path: Path) -> None:
    ran = DagTask("say", "comp-say", {}, conditions=("condition-2",))
    left_out = DagTask("say-2", "comp-say-2", {}, conditions=("condition-3",))
    downstream = DagTask("after", "comp-after", {})
    _succeeded(tmp_path / "say", "one")
    collect = functools.partial(
        collect_tasks, [ran, left_out, downstream], tmp_path, tmp_path,
        last_lines={}, started={"say"}, skipped_groups={"condition-3"},
    )  # fmt: skip
    outcomes = collect(pipeline_succeeded=False)
    assert [(t.name, t.state) for t in outcomes] == [("say", "SUCCEEDED"), ("say-2", "SKIPPED"), ("after", "NOT_RUN")]
    # kfp.local said the pipeline succeeded: whatever did not run, control flow left out.
    outcomes = collect(pipeline_succeeded=True)
    assert [t.state for t in outcomes] == ["SUCCEEDED", "SKIPPED", "SKIPPED"]


def test_a_started_step_without_a_directory_failed_with_its_last_line(tmp_path: Path) -> None:
    """A step with no output artifacts that fails gets no directory: it is FAILED, by its last line."""
    check = DagTask("check", "comp-check", {})
    (outcome,) = collect_tasks(
        [check], tmp_path / "missing", tmp_path, last_lines={"check": "ValueError: low"}, started={"check"},
        skipped_groups=set(), pipeline_succeeded=False,
    )  # fmt: skip
    assert (outcome.state, outcome.error, outcome.exit_code) == ("FAILED", "ValueError: low", 1)


def test_the_run_log_notes_skipped_groups_and_the_pipelines_verdict() -> None:
    stream = RunLog(io.StringIO(), io.StringIO())
    handler = RunLogHandler(stream)
    handler.emit(logging.LogRecord("root", logging.INFO, __file__, 1,
                                   "Skipping conditional task condition-3 (condition evaluated to False)", None, None))  # fmt: skip
    stream.write("14:16:16.469 - INFO - Pipeline \x1b[95m'cond'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m\n")
    assert stream.progress.skipped_groups == {"condition-3"}
    assert stream.progress.pipeline_status == "SUCCESS"
    stream.write("14:16:16.469 - ERROR - Pipeline 'cond' finished with status FAILURE. Inner task failed: 'x'.\n")
    assert stream.progress.pipeline_status == "FAILURE"


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def use(model: dsl.Input[dsl.Model]) -> str:
    """Return the model's path."""
    return str(model.path)


@dsl.pipeline(name="imported")
def imported() -> None:
    """An importer feeding a step."""
    found = dsl.importer(artifact_uri="/tmp/model.pt", artifact_class=dsl.Model)
    use(model=found.output)


def _kfp_said(stream: RunLog, task: str, status: str) -> None:
    stream.write(f"14:16:16.469 - INFO - Executing task \x1b[96m'{task}'\x1b[0m\n")
    stream.write(f"14:16:16.470 - INFO - Task \x1b[96m'{task}'\x1b[0m finished with status \x1b[92m{status}\x1b[0m\n")


def test_an_importer_is_reported_by_what_it_did_and_the_failed_steps_code_is_the_runs(tmp_path: Path) -> None:
    """Issue 34: an importer (run in kfp.local's process, no directory) was FAILED in a failed run, SKIPPED in a good one."""
    from kubetrain.kfp_runtime.exits import StepFailure, write_failure
    from kubetrain.tooling.outcome import RunOutcome

    tasks = dag_tasks(imported)
    assert [t.directory for t in tasks] == ["importer", "use"]
    stream = RunLog(io.StringIO(), io.StringIO())
    _kfp_said(stream, "importer", "SUCCESS")
    _kfp_said(stream, "use", "FAILURE")
    write_failure(StepFailure("InvalidInputError: epochs: got 0", 2), tmp_path / "use")
    outcomes = collect_tasks(
        tasks, tmp_path, tmp_path, last_lines={}, started=stream.progress.started, skipped_groups=set(),
        pipeline_succeeded=False, finished=stream.progress.finished,
    )  # fmt: skip
    assert [(t.name, t.state, t.exit_code) for t in outcomes] == [("importer", "SUCCEEDED", 0), ("use", "FAILED", 2)]
    run = RunOutcome("imported", "FAILED", tmp_path, tmp_path, 1.0, {}, outcomes)
    assert run.exit_code == 2
    # A step judged by its log alone (exit 1) listed first does not hide the recorded one's code.
    unrecorded = collect_tasks(
        [DagTask("x", "comp-x", {})], tmp_path / "none", tmp_path, last_lines={"x": "boom"}, started={"x"},
        skipped_groups=set(), pipeline_succeeded=False,
    )  # fmt: skip
    assert RunOutcome("imported", "FAILED", tmp_path, tmp_path, 1.0, {}, unrecorded + outcomes).exit_code == 2
    # A run that succeeded: the importer is SUCCEEDED, not SKIPPED.
    good = RunLog(io.StringIO(), io.StringIO())
    _kfp_said(good, "importer", "SUCCESS")
    (first,) = collect_tasks(
        tasks[:1], tmp_path / "elsewhere", tmp_path, last_lines={}, started=good.progress.started, skipped_groups=set(),
        pipeline_succeeded=True, finished=good.progress.finished,
    )  # fmt: skip
    assert first.state == "SUCCEEDED"
