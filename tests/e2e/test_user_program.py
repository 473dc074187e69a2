"""A pipeline as a third party writes it: components loaded from their YAML, the user's own programs.

Two pytorch_train tasks side by side (kubetrain's trainer, and a user's script that knows nothing
of kubetrain and uses only the operator's environment) and a chainermn_train running a user's MPI
script, all on this machine through kfp.local and the local backend. The pipeline also compiles.
"""

# No `from __future__ import annotations`: KFP reads pipeline signatures as real types.
from pathlib import Path

import pytest
from kfp import compiler, dsl

from kubetrain.components import compiled_yaml
from kubetrain.kfp_runtime.reuse import load_component
from kubetrain.tooling.local_run import run_pipeline_locally

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

COMPONENTS = compiled_yaml()

# A user's DDP script: the rendezvous from the operator's env (MASTER_ADDR, RANK, WORLD_SIZE), the
# workspace from KUBETRAIN_*; rank 0 leaves a file, a metrics.json with a history, a checkpoint dir.
TORCH_SCRIPT = """
import json, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
out = os.environ["KUBETRAIN_OUTPUT_DIR"]
files = len(os.listdir(os.environ["KUBETRAIN_DATA_DIR"]))
if rank == 0:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "weights.txt"), "w") as f:
        f.write(" ".join(sys.argv[1:]))
    history = [{"step": i, "loss": 1.0 / (i + 1)} for i in range(5)]
    metrics = {"world": world, "rank_sum": total.item(), "data_files": files, "history": history}
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f)
dist.destroy_process_group()
"""

# A user's MPI program: ranks from Open MPI's env; no metrics.json at all (allowed).
MPI_SCRIPT = """
import os
rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
out = os.environ["KUBETRAIN_OUTPUT_DIR"]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"rank-{rank}-of-{size}.txt"), "w") as f:
    f.write(os.environ["KUBETRAIN_DATA_DIR"])
"""


# The user's DDP script rendezvouses through env://: rank 0's store listens on every interface.
# It used to run alone (the operator's default port was every local job's); each local job now
# has a rendezvous port of its own (issue 49).
def test_a_third_party_pipeline_with_the_users_own_programs(tmp_path: Path) -> None:
    torch_script, mpi_script = tmp_path / "train.py", tmp_path / "mpi_train.py"
    torch_script.write_text(TORCH_SCRIPT)
    mpi_script.write_text(MPI_SCRIPT)
    download = load_component(str(COMPONENTS["download_dataset"]))
    pytorch_train = load_component(str(COMPONENTS["pytorch_train"]))
    chainermn_train = load_component(str(COMPONENTS["chainermn_train"]))

    @dsl.pipeline(name="third-party")
    def third_party(claim: str = "team-claim") -> None:
        data = download(workspace_pvc=claim)
        ids = {
            "run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            "task_id": dsl.PIPELINE_TASK_ID_PLACEHOLDER,
            "task_name": dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
        }
        pytorch_train(dataset=data.outputs["dataset"], workspace_pvc=claim, workers=0, epochs=2, **ids)
        pytorch_train(
            dataset=data.outputs["dataset"], workspace_pvc=claim, workers=1, **ids,
            command=["python", str(torch_script)], args=["--my-flag", "7"],
            manifest_patch={"metadata": {"labels": {"team": "vision"}}},
        )  # fmt: skip
        chainermn_train(
            dataset=data.outputs["dataset"], workspace_pvc=claim, workers=2, **ids,
            command=["python", str(mpi_script)],
        )  # fmt: skip

    compiler.Compiler().compile(third_party, str(tmp_path / "third_party.yaml"))
    outcome = run_pipeline_locally(third_party, name="third-party", arguments={}, runs_dir=tmp_path / "runs")
    assert outcome.state == "SUCCEEDED", outcome.to_json()

    ours, theirs = outcome.task("pytorch-train"), outcome.task("pytorch-train-2")
    assert ours.parameters["job_name"] != theirs.parameters["job_name"]  # one job per task
    assert ours.metrics["world_size"] == 1 and ours.metrics["test_accuracy"] > 0.5

    assert theirs.metrics["world"] == 2 and theirs.metrics["rank_sum"] == 3  # the operator's rendezvous
    assert theirs.metrics["data_files"] > 0  # KUBETRAIN_DATA_DIR pointed at the data set
    model = Path(theirs.artifacts["model"])
    assert (model / "weights.txt").read_text() == "--my-flag 7"  # its args, and no kubetrain flags
    report = Path(theirs.artifacts["report"]).read_text()
    assert "rank_sum" in report and "<svg " in report  # its metrics and its curves

    mpi = outcome.task("chainermn-train")
    files = sorted(p.name for p in Path(mpi.artifacts["model"]).iterdir())
    assert files == ["rank-0-of-2.txt", "rank-1-of-2.txt"]
    assert set(mpi.metrics) == {"job_seconds"}  # no metrics.json: fine


# Issue 49: a user's env:// program in two iterations of one ParallelFor (kfp.local runs them at
# once). Each job's rank 0 marks that its store is up; every rank then waits (bounded) until both
# jobs' marks are there, so both stores are up at the same time, and the group gathers which job
# each rank belongs to.
ENV_LOOP_SCRIPT = """
import json, os, sys, time
from datetime import timedelta
import torch.distributed as dist
marks, job = sys.argv[1], os.environ["HOSTNAME"].rsplit("-", 2)[0]
os.makedirs(marks, exist_ok=True)
dist.init_process_group("gloo", timeout=timedelta(seconds=120))
rank = dist.get_rank()
if rank == 0:
    open(os.path.join(marks, job), "w").close()
deadline = time.monotonic() + 120
while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:
    time.sleep(0.1)
overlapped = len(os.listdir(marks)) >= 2
jobs = [None] * dist.get_world_size()
dist.all_gather_object(jobs, job)
if rank == 0:
    out = os.environ["KUBETRAIN_OUTPUT_DIR"]
    os.makedirs(out, exist_ok=True)
    metrics = {"world": len(jobs), "jobs": len(set(jobs)), "overlapped": int(overlapped), "history": []}
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f)
dist.destroy_process_group()
"""


def test_two_parallel_for_iterations_of_an_env_program_run_side_by_side(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(ENV_LOOP_SCRIPT)
    marks = tmp_path / "marks"
    download = load_component(str(COMPONENTS["download_dataset"]))
    pytorch_train = load_component(str(COMPONENTS["pytorch_train"]))

    @dsl.pipeline(name="env-loop")
    def env_loop() -> None:
        data = download()
        with dsl.ParallelFor([1, 2]) as epochs:
            pytorch_train(
                dataset=data.outputs["dataset"], workers=1, epochs=epochs,
                command=["python", str(script)], args=[str(marks)],
            )  # fmt: skip

    outcome = run_pipeline_locally(env_loop, name="env-loop", arguments={}, runs_dir=tmp_path / "runs")
    assert outcome.state == "SUCCEEDED", outcome.to_json()
    loop = [t for t in outcome.tasks if t.name.startswith("pytorch-train")]
    assert len(loop) == 2, [t.name for t in outcome.tasks]
    for task in loop:
        # Both jobs' stores were up at once, and each job's ranks met only each other.
        seen = {key: task.metrics.get(key) for key in ("world", "jobs", "overlapped")}
        assert seen == {"world": 2, "jobs": 1, "overlapped": 1}, (task.name, task.metrics)
    assert len({t.parameters["job_name"] for t in loop}) == 2
