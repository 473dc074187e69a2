"""Golden compile: the committed YAML of every component and pipeline is what a fresh compile gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.tooling import compiling
from kubetrain.tooling.catalog import Entry, entries
from kubetrain.tooling.legacy import legacy_path, without_task_config


def test_committed_yaml_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["compile", "--check"])
    captured = capsys.readouterr()
    assert rc == 0, f"stale compiled YAML; run `kubetrain compile`:\n{captured.err}"
    assert f"all {len(entries())} compiled YAML files are current" in captured.out


def test_every_entry_has_its_yaml_beside_its_source() -> None:
    for entry in entries():
        assert entry.yaml_path.parent == entry.source.parent
        assert entry.yaml_path.is_file(), f"{entry.yaml_path} missing; run `kubetrain compile`"
        if entry.kind == "component":  # a folder of its own, in the hub's layout
            assert (entry.source.name, entry.source.parent.name) == ("component.py", entry.name)
        assert entry.home.name == f"{entry.kind}s"


def test_check_ignores_the_sdk_version_but_nothing_else(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    entry = Entry("component", "download_dataset")
    fresh = compiling.compile_text(entry)
    assert "sdkVersion: kfp-" in fresh
    copy = tmp_path / "download_dataset.yaml"
    monkeypatch.setattr(Entry, "yaml_path", property(lambda self: copy))
    legacy = legacy_path(copy)
    legacy.parent.mkdir()
    legacy.write_text(without_task_config(fresh))

    copy.write_text(fresh.replace("sdkVersion: kfp-", "sdkVersion: kfp-0.0.0+other-"))
    assert compiling.check_all([entry]) == []

    copy.write_text(fresh.replace("defaultValue: builtin:digits", "defaultValue: builtin:other"))
    (stale,) = compiling.check_all([entry])
    assert "-          defaultValue: builtin:other" in stale.diff
    assert "+          defaultValue: builtin:digits" in stale.diff

    copy.unlink()
    (missing,) = compiling.check_all([entry])
    assert "(missing)" in missing.diff


def test_compile_check_fails_with_the_fix_in_the_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Entry, "yaml_path", property(lambda self: tmp_path / f"{self.name}.yaml"))
    assert main(["compile", "--check", "ps_train"]) == 1
    err = capsys.readouterr().err
    assert "component ps_train" in err
    assert "run `kubetrain compile`" in err
    assert main(["compile", "ps_train"]) == 0
    assert (tmp_path / "ps_train.yaml").is_file()
    assert main(["compile", "--check", "ps_train"]) == 0


def test_compile_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "nope"]) == 2
    assert "unknown names ['nope']" in capsys.readouterr().err


def test_yaml_for_backends_before_2_15_has_no_task_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A backend before KFP 2.15 refuses TASK_CONFIG at upload; compile writes a copy without it, and checks it."""
    from kfp import compiler, components, dsl

    for entry in entries():
        legacy = legacy_path(entry.yaml_path)
        assert legacy.parent.name == "kfp-pre-2.15"
        text = legacy.read_text(encoding="utf-8")
        assert "TASK_CONFIG" not in text and "taskConfigPassthroughs" not in text, legacy
        assert "task_config:" not in text.split("executors:")[0] or entry.kind == "pipeline", legacy
    train = components.load_component_from_file(str(legacy_path(Entry("component", "pytorch_train").yaml_path)))
    assert "task_config" not in train.component_spec.inputs
    download = components.load_component_from_file(str(legacy_path(Entry("component", "download_dataset").yaml_path)))

    @dsl.pipeline(name="old-backend")
    def old_backend():  # type: ignore[no-untyped-def]  # KFP reads the signature: no return annotation
        data = download()
        train(
            dataset=data.outputs["dataset"], run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER, gpus=1,
        ).set_cpu_request("100m")  # fmt: skip

    compiler.Compiler().compile(old_backend, str(tmp_path / "old.yaml"))
    assert "TASK_CONFIG" not in (tmp_path / "old.yaml").read_text()

    # A stale pre-2.15 copy fails --check like any other.
    copy = tmp_path / "ps_train.yaml"
    monkeypatch.setattr(Entry, "yaml_path", property(lambda self: copy))
    assert main(["compile", "ps_train"]) == 0
    legacy_path(copy).write_text("stale")
    (stale,) = compiling.check_all([Entry("component", "ps_train")])
    assert stale.path == legacy_path(copy)
