"""The PS master's exit code tells its Job whether a restart could help (issue 48: futile restarts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.errors import ExitCode, KubetrainError
from kubetrain.manifests.kinds import PS_FINAL_EXIT_CODE
from kubetrain.ps.common.errors import (
    CheckpointError,
    DivergedError,
    JobAbortedError,
    PSConfigError,
    PSUnavailableError,
    StaleStateError,
)
from kubetrain.ps.master.main import exit_code, main


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (JobAbortedError("the model diverged: ..."), PS_FINAL_EXIT_CODE),
        (PSConfigError("--ps-addrs: ..."), PS_FINAL_EXIT_CODE),
        (PSUnavailableError("PS 0 unreachable"), ExitCode.JOB_FAILED),
        (CheckpointError("disk full"), ExitCode.JOB_FAILED),
        (StaleStateError("a newer master"), ExitCode.JOB_FAILED),
        (DivergedError("nan"), PS_FINAL_EXIT_CODE),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, KubetrainError) else str(v),
)
def test_only_a_failure_a_restart_would_repeat_exits_final(error: KubetrainError, code: int) -> None:
    assert exit_code(error) == code


def test_a_master_whose_flags_can_never_work_exits_final(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--port", "50051", "--data", str(tmp_path), "--output", str(tmp_path / "out"),
            "--state-dir", str(tmp_path / "state"), "--num-ps", "1", "--ps-addrs", "ps-0",
            "--job-token-file", str(tmp_path / "token")]  # fmt: skip
    assert main(args) == PS_FINAL_EXIT_CODE
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("PSConfigError: --ps-addrs: got 'ps-0'")
