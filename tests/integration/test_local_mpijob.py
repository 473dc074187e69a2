"""MPIJobs on the local backend with real `mpirun` (Open MPI) and mpi4py ranks."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.presets import CHAINERMN_IMAGE
from kubetrain.status import JobPhase
from tests.integration.local_jobs import _alive, _follow, _pids_of, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.timeout(180)]

if shutil.which("mpirun") is None:  # `make setup` installs Open MPI; without it this checkout is broken
    pytest.fail("mpirun not found: install openmpi-bin (make setup)", pytrace=False)

CLAIM = "work"


def _program(backend: LocalBackend, name: str, source: str) -> str:
    (backend.claim_dir(CLAIM) / name).write_text(textwrap.dedent(source))
    return f"/workspace/{name}"


def _template(command: list[str] | None, image: str = "registry.example/mpi:1") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "mpi",
        "image": image,
        "env": [{"name": "WORK", "value": "/workspace"}, {"name": "OMP_NUM_THREADS", "value": "1"}],
        "volumeMounts": [{"name": "work", "mountPath": "/workspace"}],
    }
    if command:
        container["command"] = command
    return {
        "spec": {
            "containers": [container],
            "volumes": [{"name": "work", "persistentVolumeClaim": {"claimName": CLAIM}}],
        }
    }


def _mpijob(
    name: str,
    launcher: list[str],
    *,
    workers: int = 2,
    slots: int = 1,
    run_policy: dict[str, Any] | None = None,
    image: str = "registry.example/mpi:1",
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": {"cleanPodPolicy": "Running", **(run_policy or {})},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": _template(launcher, image)},
                # The workers' image would run sshd; it does not run locally.
                "Worker": {"replicas": workers, "restartPolicy": "Never", "template": _template(None, image)},
            },
        },
    }


LAUNCHER_DUMP = """
    import json, os, sys, time, pathlib
    work = pathlib.Path(os.environ["WORK"])
    env = {k: v for k, v in os.environ.items() if k.startswith(("OMPI_", "K_MPI", "NVIDIA_"))}
    hostfile = pathlib.Path(env["OMPI_MCA_orte_default_hostfile"]).read_text()
    (work / "launcher.json").write_text(json.dumps({"env": env, "hostfile": hostfile, "argv": sys.argv[1:]}))
    while not (work / "gate").exists():
        time.sleep(0.02)
"""


def test_launcher_gets_the_operator_env_and_a_local_hostfile(backend: LocalBackend) -> None:
    program = _program(backend, "dump.py", LAUNCHER_DUMP)
    hosts = "--host=mj-worker-0.mj.default.svc.cluster.local:2,mj-worker-1:2"
    ref = backend.submit(_mpijob("mj", ["python", program, hosts, "--hostfile", "/etc/mpi/hostfile"], slots=2))
    claim = backend.claim_dir(CLAIM)
    _wait_for((claim / "launcher.json").exists, what="the launcher to start")
    workers = [p for p in backend.pods(ref) if p.replica_type == "Worker"]
    assert [(p.name, p.phase) for p in workers] == [("mj-worker-0", "Running"), ("mj-worker-1", "Running")]
    (claim / "gate").touch()
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED
    got = json.loads((claim / "launcher.json").read_text())
    env = got["env"]
    hostfile_path = env.pop("OMPI_MCA_orte_default_hostfile")
    assert hostfile_path.startswith(str(backend.job_dir(ref)))
    expected = {
        "K_MPI_JOB_ROLE": "launcher",
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_set_default_slots": "2",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
        "OMPI_MCA_mpi_yield_when_idle": "1",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    }
    if os.geteuid() == 0:
        expected |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    assert env == expected
    assert got["hostfile"] == "localhost slots=4\n"  # 2 workers x 2 slots, all on this machine
    assert got["argv"] == ["--host=localhost:2,localhost:2", "--hostfile", hostfile_path]
    # cleanPodPolicy Running: the workers went with the job.
    assert [p.replica_type for p in backend.pods(ref)] == ["Launcher"]


ALL_REDUCE = """
    import os, pathlib
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    total = comm.allreduce(comm.rank + 1)
    pathlib.Path(os.environ["WORK"], f"rank-{comm.rank}").write_text(f"{comm.size} {total}")
"""


def test_mpirun_starts_the_ranks_on_this_machine(backend: LocalBackend) -> None:
    program = _program(backend, "allreduce.py", ALL_REDUCE)
    ref = backend.submit(_mpijob("ranks", ["mpirun", "-n", "2", "python", program]))
    status, phases = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED, status.message
    assert phases[-2:] == [JobPhase.RUNNING, JobPhase.SUCCEEDED]
    claim = backend.claim_dir(CLAIM)
    assert [(claim / f"rank-{r}").read_text() for r in range(2)] == ["2 3", "2 3"]
    assert status.replicas["Launcher"].succeeded == 1


def test_delete_stops_mpirun_and_every_rank(backend: LocalBackend, tmp_path: Path) -> None:
    program = _program(
        backend,
        "hang.py",
        """
        import os, pathlib, time
        from mpi4py import MPI
        pathlib.Path(os.environ["WORK"], f"pid-{MPI.COMM_WORLD.rank}").write_text(str(os.getpid()))
        time.sleep(600)
        """,
    )
    ref = backend.submit(_mpijob("hang", ["mpirun", "-n", "2", "python", program]))
    claim = backend.claim_dir(CLAIM)
    _wait_for(lambda: all((claim / f"pid-{r}").exists() for r in range(2)), what="both ranks")
    ranks = [int((claim / f"pid-{r}").read_text()) for r in range(2)]
    assert os.getpgid(ranks[0]) != os.getpgid(ranks[1])  # each rank in its own process group
    backend.delete(ref)
    assert _pids_of(tmp_path) == []
    assert not any(_alive(pid) for pid in ranks)


def test_launcher_failures_past_the_backoff_limit_fail_the_job(backend: LocalBackend) -> None:
    ref = backend.submit(_mpijob("fails", ["python", "-c", "import sys; sys.exit(3)"], run_policy={"backoffLimit": 1}))
    status, phases = _follow(backend, ref)
    assert status.phase is JobPhase.FAILED
    assert status.reason == "BackoffLimitExceeded/Error"
    assert "Job has reached the specified backoff limit" in status.message
    assert "exited with code 3" in status.message
    assert JobPhase.RESTARTING not in phases  # mpi-operator never writes Restarting
    launcher = next(p for p in backend.pods(ref) if p.replica_type == "Launcher")
    assert launcher.restart_count == 1  # backoffLimit 1: one retry, then the Job fails


def test_launcher_deadline(backend: LocalBackend) -> None:
    ref = backend.submit(
        _mpijob("late", ["python", "-c", "import time; time.sleep(600)"], run_policy={"activeDeadlineSeconds": 1})
    )
    status, _ = _follow(backend, ref, timeout=30)
    assert status.phase is JobPhase.FAILED
    assert (status.reason, status.message) == ("DeadlineExceeded", "Job was active longer than specified deadline")


def test_a_launcher_without_workers_runs_alone(backend: LocalBackend) -> None:
    manifest = _mpijob("solo", ["python", "-c", "print('alone')"])
    del manifest["spec"]["mpiReplicaSpecs"]["Worker"]  # optional in mpi-operator v2beta1
    ref = backend.submit(manifest)
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.SUCCEEDED
    (launcher,) = backend.pods(ref)
    assert list(backend.pod_log(ref, launcher, follow=False)) == ["alone"]


USER_CHAINERMN = """
    import os, pathlib
    import chainer, chainermn  # Chainer 7.8.1 imports numpy.distutils: needs stdlib distutils
    comm = chainermn.create_communicator("naive")
    total = comm.allreduce_obj(comm.rank + 1)
    pathlib.Path(os.environ["WORK"], f"chainermn-{comm.rank}").write_text(f"{comm.size} {total}")
"""


def test_a_users_chainermn_program_imports_chainer_as_in_the_image(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chainermn image sets SETUPTOOLS_USE_DISTUTILS=stdlib; nobody exports it on this machine.
    monkeypatch.delenv("SETUPTOOLS_USE_DISTUTILS", raising=False)
    program = _program(backend, "user_chainermn.py", USER_CHAINERMN)
    ref = backend.submit(_mpijob("chainer", ["mpirun", "-n", "2", "python", program], image=CHAINERMN_IMAGE))
    status, _ = _follow(backend, ref)
    log = "\n".join(backend.pod_log(ref, backend.pods(ref)[0], follow=False))
    assert status.phase is JobPhase.SUCCEEDED, log
    claim = backend.claim_dir(CLAIM)
    assert [(claim / f"chainermn-{r}").read_text() for r in range(2)] == ["2 3", "2 3"]


EXIT_ON_RANK_1 = """
    import sys
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if comm.rank == 1:
        sys.exit(3)
    comm.Barrier()  # rank 0 waits here for rank 1, which never comes
"""


def test_a_rank_that_exits_non_zero_ends_the_job_instead_of_hanging_it(backend: LocalBackend) -> None:
    """Issue 34: `sys.exit(3)` on one rank hung the job until its timeout (mpi4py finalizes at exit)."""
    from kubetrain.presets.defaults import mpirun

    program = _program(backend, "exit3.py", EXIT_ON_RANK_1)
    launcher = list(mpirun(2, (), ("python", program)))
    ref = backend.submit(_mpijob("exit3", launcher, run_policy={"backoffLimit": 0, "activeDeadlineSeconds": 90}))
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.FAILED
    assert status.reason != "DeadlineExceeded", status.message


BARRIER_THEN_SAY = """
    import os, pathlib
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    pathlib.Path(os.environ["WORK"], f"rank-{MPI.COMM_WORLD.rank}").write_text("ok")
"""


def test_python_options_before_the_script_stay_pythons_under_mpi4pys_runner(backend: LocalBackend) -> None:
    """`python -u train.py` became `python -m mpi4py -u train.py`, which mpi4py refused ('Unknown option: -u')."""
    from kubetrain.presets.defaults import mpirun

    program = _program(backend, "barrier.py", BARRIER_THEN_SAY)
    launcher = list(mpirun(2, (), ("python", "-u", "-W", "ignore", program)))
    ref = backend.submit(_mpijob("pyopts", launcher, run_policy={"backoffLimit": 0}))
    status, _ = _follow(backend, ref)
    log = "\n".join(backend.pod_log(ref, backend.pods(ref)[0], follow=False))
    assert status.phase is JobPhase.SUCCEEDED, log
    assert sorted(p.name for p in backend.claim_dir(CLAIM).glob("rank-*")) == ["rank-0", "rank-1"]


def test_a_program_file_that_is_not_there_fails_the_launcher_once(backend: LocalBackend) -> None:
    """Issue 49 item 7: mpirun's ranks could not open the program, and the launcher was started backoffLimit + 1 times."""
    from kubetrain.presets.defaults import mpirun

    launcher = list(mpirun(2, (), ("python", "-u", "/workspace/trian.py")))
    ref = backend.submit(_mpijob("nofile", launcher, run_policy={"backoffLimit": 3}))
    status, _ = _follow(backend, ref)
    assert status.phase is JobPhase.FAILED
    assert "python: can't open file '/workspace/trian.py'" in status.message, status.message
    launcher_pod = next(p for p in backend.pods(ref) if p.replica_type == "Launcher")
    assert launcher_pod.restart_count == 0
