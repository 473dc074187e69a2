"""`kubetrain launch` as a real process against the stand-in API server (tests/fake_apiserver.py).

The stand-in is not a cluster (see that module); the process is real: it reads KUBECONFIG, gets a
real SIGTERM the way a cancelled KFP run's pod does, and must delete its job and exit with the
cancelled code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubetrain.errors import ExitCode
from kubetrain.manifests.kinds import PYTORCHJOB
from tests.fake_apiserver import FakeApiServer, make_pod
from tests.integration.k8s_launcher_env import NS, pytorch_manifest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def launch_process(api: FakeApiServer, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(pytorch_manifest(workers=0)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS))
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "kubetrain", "launch", "-f", str(manifest), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_deletes_the_job_and_exits_cancelled(tmp_path: Path, sig: signal.Signals) -> None:
    with FakeApiServer() as api:
        proc = launch_process(api, tmp_path, "--timeout", "300")
        try:
            api.wait_job(PYTORCHJOB, NS, "train", timeout=60)
            api.put_pod(make_pod("train", NS, kind=PYTORCHJOB, replica_type="Master", phase="Running"))
            api.set_conditions(PYTORCHJOB, NS, "train", ("Running", "True", "PyTorchJobRunning", ""))
            # The launcher is blocked in its watch (and the follower in the pod's log) when the signal comes.
            api.wait_request(lambda r: r.verb == "watch", "the launcher's watch", timeout=60)
            api.wait_request(lambda r: r.resource == "pods/log", "the log follow", timeout=60)
            proc.send_signal(sig)
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == ExitCode.CANCELLED, stderr
        [(plural, namespace, name, options)] = api.deletions
        assert (plural, namespace, name, options["propagationPolicy"]) == ("pytorchjobs", NS, "train", "Foreground")
        assert options["preconditions"]["uid"]
        assert ("pytorchjobs", NS, "train") not in api.objects
        assert f"cancelled ({sig.name}); deleted PyTorchJob {NS}/train" in stderr


def test_json_result_and_exit_code_of_a_timeout(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        proc = launch_process(api, tmp_path, "--timeout", "2", "--json", "--on-timeout", "delete")
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.TIMEOUT, stderr
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["exit_code"] == ExitCode.TIMEOUT and out["error_type"] == "JobTimeoutError"
    assert api.deletions and api.deletions[0][:3] == ("pytorchjobs", NS, "train")


def test_bad_manifest_is_invalid_input_and_nothing_is_sent(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        manifest = tmp_path / "job.yaml"
        manifest.write_text("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\n")
        env = {**os.environ, "KUBECONFIG": str(api.write_kubeconfig(tmp_path / "kc"))}
        proc = subprocess.run([sys.executable, "-m", "kubetrain", "launch", "-f", str(manifest)], env=env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == ExitCode.INVALID_INPUT
        assert "TFJob" in proc.stderr
        assert api.requests == []


def test_dry_run_prints_the_object_and_creates_nothing(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        proc = launch_process(api, tmp_path, "--dry-run", "--json")
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        obj = json.loads(stdout)
        assert (obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]) == ("PyTorchJob", "train", NS)
        assert api.objects == {}
        [create] = [r for r in api.requests if r.verb == "create"]
        assert (create.query["dryRun"], create.query["fieldValidation"]) == ("All", "Strict")
