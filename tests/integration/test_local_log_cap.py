"""A chatty local pod cannot fill the disk: its captured log is capped by rotation, as the kubelet caps it,
and the launcher relays only so much of it to its own output (`kubetrain run`'s run.log, a KFP step's log)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.launcher import AwaitOptions, Tuning, run_job
from kubetrain.status import JobPhase
from tests.integration.local_jobs import _follow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CAP = 4096
LINES = 5000  # about 330 kB of output, some eighty times the cap
CHATTY = f"for i in range({LINES}): print(f'line {{i:05d}} ' + 'x' * 50)"


def _chatty_job() -> dict[str, object]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "img", "command": ["python", "-c", CHATTY]}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "chatty"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}},
    }


def test_a_chatty_pods_log_keeps_two_capped_files_and_its_newest_lines(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "root", max_log_bytes=CAP, max_grace_seconds=1.0)
    try:
        ref = backend.submit(_chatty_job())
        status, _ = _follow(backend, ref)
        assert status.phase is JobPhase.SUCCEEDED
        logs = backend.job_dir(ref) / "logs"
        assert sorted(p.name for p in logs.iterdir()) == ["chatty-master-0.0.log", "chatty-master-0.0.log.1"]
        assert all(p.stat().st_size <= CAP for p in logs.iterdir())
        lines = list(backend.pod_log(ref, backend.pods(ref)[0], follow=False))
    finally:
        backend.close()
    # The current file says where the previous part is and how much was dropped before it.
    note = re.fullmatch(
        rf"\[kubetrain: the log passed {CAP} bytes; the previous part is in chatty-master-0\.0\.log\.1, "
        r"(\d+) earlier bytes were dropped\]",
        lines[0],
    )
    assert note is not None, lines[0]
    assert int(note.group(1)) > 300_000
    # What is kept is the end of the output, in order.
    numbers = [int(line.split()[1]) for line in lines[1:]]
    assert numbers == list(range(LINES - len(numbers), LINES))


def test_the_launcher_relays_a_chatty_programs_log_up_to_its_cap_and_the_last_lines(tmp_path: Path) -> None:
    """Issue 48: a program printing 100 MB made a 141 MB run.log; the pod's log was capped, its relay was not."""
    backend = LocalBackend(tmp_path / "root", max_grace_seconds=1.0)
    said: list[str] = []
    options = AwaitOptions(timeout_seconds=90, tuning=Tuning(max_relayed_log_bytes=CAP, pending_poll_seconds=0.1))
    try:
        result = run_job(_chatty_job(), backend=backend, options=options, log_sink=said.append)
    finally:
        backend.close()
    assert result.phase is JobPhase.SUCCEEDED
    assert sum(len(line) + 1 for line in said) < CAP + 8_000  # not the 330 kB the program printed
    summary = next(line for line in said if "of the program's log were not relayed" in line)
    assert "its pods' logs are in" in summary  # where the whole (rotated) log is
    assert said[said.index(summary) + 20].endswith(f"line {LINES - 1:05d} " + "x" * 50)  # the last line is shown
