"""The job outcome the master records in its state dir, and workers giving up their retries on it."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from kubetrain.errors import ExitCode
from kubetrain.ps.common.errors import CheckpointError, JobEndedError, PSUnavailableError
from kubetrain.ps.common.outcome import (
    OUTCOME_FILE,
    STATE_DIR_ENV,
    JobOutcome,
    clear_outcome,
    read_outcome,
    state_dir_from,
    stop_if_ended,
    write_outcome,
)
from kubetrain.ps.common.rpc import call_with_retry, make_channel
from kubetrain.ps.harness.localrun import free_port
from kubetrain.ps.proto import kubetrain_ps_pb2 as pb
from kubetrain.ps.proto import kubetrain_ps_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)


def test_outcome_round_trips_and_clears(tmp_path: Path) -> None:
    assert read_outcome(tmp_path) is None
    write_outcome(tmp_path, JobOutcome(phase="failed", reason="too many records dropped"))
    assert read_outcome(tmp_path) == JobOutcome(phase="failed", reason="too many records dropped")
    clear_outcome(tmp_path)
    assert read_outcome(tmp_path) is None
    clear_outcome(tmp_path)  # nothing to clear is fine


def test_an_outcome_that_is_not_an_end_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="training"):
        JobOutcome(phase="training")
    (tmp_path / OUTCOME_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="unreadable"):
        read_outcome(tmp_path)


def test_state_dir_comes_from_the_flag_then_the_jobset_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    assert state_dir_from(None) is None
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "env"))
    assert state_dir_from(None) == tmp_path / "env"
    assert state_dir_from(tmp_path / "flag") == tmp_path / "flag"


# A worker exits 0 either way: the master's Job carries a failure (a worker's would restart the set).
@pytest.mark.parametrize(("phase", "code"), [("failed", ExitCode.SUCCESS), ("done", ExitCode.SUCCESS)])
def test_the_hook_ends_the_job_with_the_recorded_phase(tmp_path: Path, phase: str, code: ExitCode) -> None:
    check = stop_if_ended(tmp_path)
    check()  # no outcome yet: keep retrying
    write_outcome(tmp_path, JobOutcome(phase=phase, reason="why"))
    with pytest.raises(JobEndedError) as info:
        check()
    assert (info.value.failed, info.value.exit_code) == (phase == "failed", code)


def _get_job_info(addr: str) -> pb.JobInfo:
    with make_channel(addr, token=None) as channel:
        return pb_grpc.MasterStub(channel).GetJobInfo(pb.WorkerRef(worker_id="w"), timeout=2)


def test_a_gone_master_with_a_recorded_end_is_not_retried(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens: UNAVAILABLE
    write_outcome(tmp_path, JobOutcome(phase="failed", reason="poison"))
    with pytest.raises(JobEndedError, match="poison"):
        # The deadline is far beyond the test's timeout: only the hook can end this call.
        call_with_retry(
            lambda: _get_job_info(addr), what="GetJobInfo", deadline_s=600, on_retry=stop_if_ended(tmp_path)
        )


def test_without_a_recorded_end_the_retry_deadline_still_applies(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(PSUnavailableError) as info:
        call_with_retry(lambda: _get_job_info(addr), what="GetJobInfo", deadline_s=1, on_retry=stop_if_ended(tmp_path))
    cause = info.value.__cause__
    assert isinstance(cause, grpc.Call) and cause.code() is grpc.StatusCode.UNAVAILABLE
