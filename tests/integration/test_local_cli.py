"""`kubetrain launch -f MANIFEST --local`: rendered manifests with the real training programs, exit codes,
and SIGTERM leaving no replica process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.data.download import download
from kubetrain.errors import ExitCode
from tests.integration.local_jobs import _pids_of, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CLAIM = "work"


def _kubetrain(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # The timeout is a hang guard: a torch job on two cores loaded by other work takes minutes.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kubetrain", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _render(kind: str, tmp_path: Path, *flags: str) -> Path:
    done = _kubetrain(
        "render", kind, "--name", f"cli-{kind}", "--workspace-pvc", CLAIM, *flags, "-o", "yaml", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    path = tmp_path / f"{kind}.yaml"
    path.write_text(done.stdout)
    return path


def _launch(manifest: Path, root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return _kubetrain(
        "launch", "-f", str(manifest), "--local", "--local-root", str(root), "--json", *flags, cwd=root.parent
    )


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in digits data set, downloaded once for the module."""
    out = tmp_path_factory.mktemp("data") / "digits"
    download("builtin:digits", out, quiet=True)
    return out


def _claim_with_digits(root: Path, digits: Path) -> Path:
    claim = root / "claims" / CLAIM
    (claim / "datasets").mkdir(parents=True)
    (claim / "datasets" / "digits").symlink_to(digits, target_is_directory=True)
    return claim


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_rendered_pytorchjob_trains_with_gloo_on_master_and_two_workers(tmp_path: Path, digits: Path) -> None:
    root = tmp_path / "root"
    claim = _claim_with_digits(root, digits)
    manifest = _render("pytorchjob", tmp_path, "--workers", "2", "--epochs", "1")
    done = _launch(manifest, root)
    assert done.returncode == ExitCode.SUCCESS, done.stderr[-3000:]
    assert _result(done)["phase"] == "Succeeded"
    metrics = json.loads((claim / "runs" / "cli-pytorchjob" / "output" / "metrics.json").read_text())
    assert metrics["world_size"] == 3
    assert metrics["test_accuracy"] > 0.5
    assert _pids_of(tmp_path) == []


def test_rendered_elastic_pytorchjob_rendezvous_under_torchrun(tmp_path: Path, digits: Path) -> None:
    root = tmp_path / "root"
    claim = _claim_with_digits(root, digits)
    # 2:2, not 1:2: with a minimum of 1, torchrun starts training once the last-call window after
    # the first worker's join closes, and a second worker slow to start on a loaded machine joins
    # later through a re-rendezvous that restarts both (run 3 of the stressed loop: over 240 s).
    # With both required, the rendezvous completes when both have joined, however late.
    manifest = _render("pytorchjob", tmp_path, "--workers", "2", "--elastic", "2:2", "--epochs", "1")
    assert "torch.distributed.run" in manifest.read_text()
    # torchrun's c10d store listens on every interface: at the manifest's port (the operator's
    # default 23456) it made every other local PyTorchJob of the test session fail to host its
    # rendezvous (CI, stop 38). The local backend gives the job a rendezvous port of its own.
    done = _launch(manifest, root)
    assert done.returncode == ExitCode.SUCCESS, done.stderr[-3000:]
    metrics = json.loads((claim / "runs" / "cli-pytorchjob" / "output" / "metrics.json").read_text())
    assert metrics["world_size"] == 2  # both workers joined the c10d rendezvous at worker-0's address
    assert _pids_of(tmp_path) == []


@pytest.mark.mpi
def test_rendered_mpijob_trains_chainermn_with_a_launcher_and_two_workers(tmp_path: Path, digits: Path) -> None:
    root = tmp_path / "root"
    claim = _claim_with_digits(root, digits)
    manifest = _render("mpijob", tmp_path, "--workers", "2", "--epochs", "1")
    done = _launch(manifest, root)
    assert done.returncode == ExitCode.SUCCESS, done.stderr[-3000:]
    assert _result(done)["phase"] == "Succeeded"
    metrics = json.loads((claim / "runs" / "cli-mpijob" / "output" / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert _pids_of(tmp_path) == []


def _pytorchjob(name: str, command: list[str], *, workers: int = 2, **run_policy: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "registry.example/t:1", "command": command}]}}
    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if workers:
        replicas["Worker"] = {"replicas": workers, "restartPolicy": "Never", "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": replicas},
    }


def _write(tmp_path: Path, manifest: dict[str, Any]) -> Path:
    path = tmp_path / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def _sleeper(tmp_path: Path) -> list[str]:
    """A replica command whose command line names tmp_path (so the test can find its processes)."""
    program = tmp_path / "sleep.py"
    program.write_text("import time\ntime.sleep(600)\n")
    return ["python", str(program)]


def test_exit_codes_of_launch(tmp_path: Path) -> None:
    root = tmp_path / "root"
    failing = _write(tmp_path, _pytorchjob("fails", ["python", "-c", "raise SystemExit(3)"], workers=0))
    done = _launch(failing, root)
    assert done.returncode == ExitCode.JOB_FAILED, done.stderr[-2000:]
    assert "exited with code 3" in done.stderr
    # No cluster here: the hint points at the logs the local backend kept, not at kubectl.
    assert "kubectl" not in done.stderr
    assert f"its pods' logs are in {root}/jobs/default/fails-" in done.stderr

    broken = _pytorchjob("broken", ["python", "-c", "pass"])
    del broken["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"]
    done = _launch(_write(tmp_path, broken), root)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "Master.replicas" in done.stderr
    assert not (root / "jobs" / "default").exists() or not list((root / "jobs" / "default").glob("broken-*"))

    slow = _write(tmp_path, _pytorchjob("slow", _sleeper(tmp_path), workers=1))
    done = _launch(slow, root, "--timeout", "3")
    assert done.returncode == ExitCode.TIMEOUT, done.stderr[-2000:]
    assert _pids_of(tmp_path) == []


def test_sigterm_to_launch_stops_every_replica(tmp_path: Path) -> None:
    root = tmp_path / "root"
    manifest = _write(tmp_path, _pytorchjob("cancel", _sleeper(tmp_path), workers=2))
    launch = subprocess.Popen(
        [sys.executable, "-m", "kubetrain", "launch", "-f", str(manifest), "--local", "--local-root", str(root)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Every replica is this program, whose path is under tmp_path (the launcher's own command line
        # names the manifest, also under tmp_path, so it is counted too).
        _wait_for(lambda: len(_pids_of(tmp_path)) == 4, timeout=60, what="the launcher and three replicas")
        replicas = [pid for pid in _pids_of(tmp_path) if pid != launch.pid]
        launch.send_signal(signal.SIGTERM)
        # The replicas would sleep for 600 s: gone within this bound means the launcher stopped them.
        _wait_for(lambda: not any(pid in _pids_of(tmp_path) for pid in replicas), timeout=120, what="replicas to go")
        assert launch.wait(timeout=120) == ExitCode.CANCELLED
        assert "cancelled" in (launch.stderr.read() if launch.stderr else "")
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    assert _pids_of(tmp_path) == []


def test_repeated_signals_while_cancelling_keep_exit_5_and_the_json(tmp_path: Path) -> None:
    """Signals that kept coming while the launcher cancelled used to kill it with 143 and no JSON."""
    root = tmp_path / "root"
    manifest = _write(tmp_path, _pytorchjob("again", _sleeper(tmp_path), workers=1))
    launch = subprocess.Popen(
        [sys.executable, "-m", "kubetrain", "launch", "-f", str(manifest), "--local", "--local-root", str(root),
         "--json"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: len(_pids_of(tmp_path)) == 3, timeout=60, what="the launcher and two replicas")
        # A storm, as from an impatient user or a supervisor repeating itself: SIGTERM and SIGINT
        # every few milliseconds until the launcher has exited, so that every stage of the
        # cancellation and of the clean-up after it receives some.
        signals = (signal.SIGTERM, signal.SIGINT)
        sent = 0
        while launch.poll() is None and sent < 5000:
            launch.send_signal(signals[sent % 2])
            sent += 1
            time.sleep(0.005)
        out, _ = launch.communicate(timeout=30)
        assert launch.returncode == ExitCode.CANCELLED
        assert json.loads(out.strip().splitlines()[-1])["exit_code"] == ExitCode.CANCELLED
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    _wait_for(lambda: _pids_of(tmp_path) == [], timeout=10, what="every replica to go")


def _head(result: dict[str, Any]) -> dict[str, Any]:
    """The five keys every `--json` object begins with (docs/user-guide.md), whatever the command."""
    return {key: result[key] for key in ("state", "exit_code", "error", "error_type", "warnings")}


def test_unreadable_inputs_of_launch_are_one_line_errors(tmp_path: Path) -> None:
    root = tmp_path / "root"
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump([_pytorchjob("a", ["python", "-c", "pass"])]))
    done = _launch(listed, root)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "expected one job object (a mapping with apiVersion, kind, ...), found a list" in done.stderr
    assert _head(_result(done)) == {
        "state": "FAILED",
        "exit_code": ExitCode.INVALID_INPUT,
        "error": f"{listed}: expected one job object (a mapping with apiVersion, kind, ...), found a list",
        "error_type": "ManifestError",
        "warnings": [],
    }
    assert _result(done)["name"] is None  # launch's own keys are there, empty: no job was read

    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"kind: \xff\xfe\n")
    done = _launch(latin, root)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "not UTF-8 text" in done.stderr and "Traceback" not in done.stderr
    assert _head(_result(done)) == {
        "state": "FAILED",
        "exit_code": ExitCode.INVALID_INPUT,
        "error": f"{latin}: not UTF-8 text (byte 6: invalid start byte); save the manifest as UTF-8",
        "error_type": "ManifestError",
        "warnings": [],
    }

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    good = _write(tmp_path, _pytorchjob("good", ["python", "-c", "pass"], workers=0))
    done = _launch(good, a_file)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["error"].startswith(f"local root {a_file}: cannot be used")
