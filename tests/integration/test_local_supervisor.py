"""The local backend's supervisor failing: a crashed controller and a SIGKILLed supervisor process
leave no replica process behind.
"""

from __future__ import annotations

import json
import signal
import textwrap
from pathlib import Path

import pytest

from kubetrain.backends.local.backend import LocalBackend
from kubetrain.errors import BackendError
from tests.integration.local_jobs import CLAIM, _alive, _pids_of, _program, _pytorchjob, _template, _wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the injected bug's traceback
def test_a_crashed_supervisor_reads_as_a_backend_error_and_stops_its_processes(
    backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubetrain.backends.local.operators.pytorchjob import PyTorchJobController

    program = _program(backend, "forever.py", "import time\ntime.sleep(600)\n")
    reconcile = PyTorchJobController.reconcile
    calls: list[int] = []

    def crash_after_start(self: PyTorchJobController, now: float) -> None:
        calls.append(1)
        if len(calls) > 3:  # a bug in a later pass, once the replicas run
            raise RuntimeError("injected controller bug")
        reconcile(self, now)

    monkeypatch.setattr(PyTorchJobController, "reconcile", crash_after_start)
    ref = backend.submit(_pytorchjob("crash", _template(["python", program]), None))
    observed = list(backend.watch(ref, timeout_seconds=60))  # ends when the supervisor dies, not at the timeout
    assert observed
    with pytest.raises(BackendError, match="stopped unexpectedly"):
        backend.get(ref)
    assert _pids_of(tmp_path) == []
    backend.delete(ref)  # returns at once


SUPERVISOR = """
    import json, pathlib, sys, time
    from kubetrain.backends.local.backend import LocalBackend
    root, manifest = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2])
    backend = LocalBackend(root, max_grace_seconds=1.0)
    backend.submit(manifest)
    pid_file = backend.claim_dir("work") / "child.pid"
    while not (pid_file.exists() and pid_file.read_text()):
        time.sleep(0.02)
    print("ready", flush=True)
    time.sleep(600)
"""


# A replica that leaves a child in another process group which ignores SIGTERM (as mpirun leaves
# ranks): the parent-death signal reaches only the main process; the child outlives it unless the
# backend's watchdog kills the whole session.
STUBBORN_TREE = """
    import os, pathlib, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"], process_group=0)
    pathlib.Path(os.environ["WORK"], "child.pid").write_text(str(child.pid))
    time.sleep(600)
"""


def test_a_sigkilled_supervisor_leaves_no_process_behind(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = tmp_path / "root"
    claim = root / "claims" / CLAIM
    claim.mkdir(parents=True)
    (claim / "tree.py").write_text(textwrap.dedent(STUBBORN_TREE))
    manifest = _pytorchjob("orphans", _template(["python", "/workspace/tree.py"]), None)
    supervisor = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SUPERVISOR), str(root), json.dumps(manifest)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert supervisor.stdout is not None and supervisor.stdout.readline().strip() == "ready"
        child = int((claim / "child.pid").read_text())
        supervisor.send_signal(signal.SIGKILL)  # no handler, no atexit: only the watchdog can act
        supervisor.wait(timeout=10)
        _wait_for(lambda: _pids_of(tmp_path) == [], timeout=10, what="the replica's main process to go")
        # The child ignores SIGTERM: it goes only with the watchdog's SIGKILL after the grace period.
        _wait_for(lambda: not _alive(child), timeout=10, what="the replica's child to go")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
