"""docs/user-guide.md's example, run: a user's own programs and steps in a pipeline on this machine.

docs/examples/user_pipeline.py under kfp.local and the local backend: a user's step reads the
downloaded data set through kubetrain.kfp_runtime.workspace.dataset_dir; the user's DDP script,
ChainerMN script and PS model module train; a later step of the user's loads each model and
scores it. Nothing is exported for Chainer (SETUPTOOLS_USE_DISTUTILS is removed), as on a machine
where nobody knows about it.
"""

from pathlib import Path

import pytest

from kubetrain.tooling.local_run import run_pipeline_locally

pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.timeout(900)]

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


# The guide's DDP program (docs/examples/ddp_train.py) rendezvouses through env://: rank 0's store
# listens on every interface. It used to run alone (the operator's default port was every local
# job's); each local job now has a rendezvous port of its own (issue 49).
def test_the_user_guides_pipeline_reads_the_data_and_loads_every_frameworks_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SETUPTOOLS_USE_DISTUTILS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # The PS model module is on PYTHONPATH, as it would be in the user's image.
    monkeypatch.setenv("PYTHONPATH", str(EXAMPLES))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from user_pipeline import make_pipeline

    outcome = run_pipeline_locally(
        make_pipeline(str(EXAMPLES)), name="user-programs", arguments={}, runs_dir=tmp_path / "runs"
    )
    assert outcome.state == "SUCCEEDED", outcome.to_json()

    records = outcome.task("download-dataset").parameters
    assert outcome.task("inspect-dataset").parameters["Output"] > 1000, records  # the digits' training split
    for step in ("score-torch-model", "score-chainer-model", "score-ps-model"):
        assert outcome.task(step).parameters["Output"] > 0.8, (step, outcome.to_json())

    report = Path(outcome.task("pytorch-train").artifacts["report"]).read_text()
    assert "<h2>Inputs</h2>" in report and "ddp_train.py --epochs 4" not in report  # command and args apart
    assert f"python {EXAMPLES}/ddp_train.py" in report and "--epochs 4" in report
    assert "learning_rate" not in report  # not given to a user's program, so not shown as if it were
