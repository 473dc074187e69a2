"""The step notices when it runs without its TaskConfig passthroughs (the plain KFP loader drops them)."""

from __future__ import annotations

from pathlib import Path

from kubetrain.kfp_runtime.passthrough import passthrough_warning


def test_a_gpu_on_the_launcher_pod_is_reported_loudly_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").write_text("")
    warning = passthrough_warning({}, environ={}, dev_dir=tmp_path)
    assert warning is not None
    assert "without its TaskConfig passthroughs" in warning
    assert "kubetrain.components.load_component" in warning
    warning = passthrough_warning({}, environ={"NVIDIA_VISIBLE_DEVICES": "GPU-1"}, dev_dir=tmp_path / "none")
    assert warning is not None and "GPU" in warning


def test_no_task_config_at_all_is_reported(tmp_path: Path) -> None:
    warning = passthrough_warning(None, environ={}, dev_dir=tmp_path)
    assert warning is not None and "received no TaskConfig" in warning


def test_a_step_with_its_passthroughs_is_quiet(tmp_path: Path) -> None:
    assert passthrough_warning({"resources": {"limits": {"nvidia.com/gpu": 1}}}, environ={}, dev_dir=tmp_path) is None
    assert passthrough_warning({}, environ={"NVIDIA_VISIBLE_DEVICES": "void"}, dev_dir=tmp_path) is None
