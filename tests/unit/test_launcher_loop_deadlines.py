"""The await loop's limits: the overall and start timeouts (delete or suspend), the watch windows,
and options refused before anything is submitted.
"""

from __future__ import annotations

import pytest

from kubetrain.errors import (
    InvalidInputError,
    JobTimeoutError,
    ManifestError,
)
from kubetrain.launcher import AwaitOptions, run_job
from tests.unit.launcher_memory_backend import MemoryBackend, cond, launch, manifest, pod

pytestmark = pytest.mark.timeout(60)


def test_timeout_deletes_the_job() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))

    with pytest.raises(JobTimeoutError, match="deleted it"):
        launch(backend, script, timeout_seconds=0.5)
    assert backend.calls[-1] == "delete"


def test_timeout_can_suspend_instead() -> None:
    backend = MemoryBackend()
    with pytest.raises(JobTimeoutError, match="suspended it"):
        launch(backend, lambda b: None, timeout_seconds=0.3, on_timeout="suspend")
    assert "suspend" in backend.calls
    assert "delete" not in backend.calls


def test_bad_options_and_kinds_submit_nothing() -> None:
    backend = MemoryBackend()
    with pytest.raises(InvalidInputError, match="timeout_seconds"):
        run_job(manifest(), backend=backend, options=AwaitOptions(timeout_seconds=0))
    with pytest.raises(InvalidInputError, match="delete_after"):
        run_job(manifest(), backend=backend, options=AwaitOptions(timeout_seconds=1, delete_after="sometimes"))  # type: ignore[arg-type]
    with pytest.raises(ManifestError, match="TFJob"):
        run_job({**manifest(), "kind": "TFJob"}, backend=backend, options=AwaitOptions(timeout_seconds=1))
    assert backend.calls == []


def test_start_timeout_ends_a_job_that_never_runs_and_names_the_pending_pods() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Pending", reason="ImagePullBackOff"))
        b.set_conditions(cond("Created"))

    with pytest.raises(JobTimeoutError, match=r"did not start within 0\.5s .*train-abc-master-0: ImagePullBackOff"):
        launch(backend, script, start_timeout_seconds=0.5)
    assert backend.calls[-1] == "delete"


def test_start_timeout_no_longer_applies_once_running() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Running"))
        b.wait_for_line("→ Running")
        # Well past the start timeout, still running: only the overall timeout may end it now.
        b.wait_for(lambda: b.calls.count("watch") >= 3, "more watch windows")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded"))
        b.set_conditions(cond("Succeeded"))

    launch(backend, script, start_timeout_seconds=0.2, tuning={"watch_window_seconds": 0.2})
    assert "delete" in backend.calls


def test_watch_windows_vary_so_parallel_launchers_do_not_reconnect_together() -> None:
    # A thousand steps started together must not reopen their watches at the same instant every
    # window: the API server answers such a burst with 429s (docs/benchmarks.md, Scale).
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))
        b.wait_for(lambda: b.calls.count("watch") >= 6, "six watch windows")
        b.set_conditions(cond("Succeeded"))

    launch(backend, script, tuning={"watch_window_seconds": 0.2})
    windows = backend.windows[:6]
    assert all(0.1 <= w <= 0.2 for w in windows), windows
    assert len(set(windows)) == len(windows), windows
