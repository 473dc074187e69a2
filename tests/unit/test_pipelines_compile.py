"""Golden compile: the committed YAML of every component and pipeline is what a fresh compile gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.tooling import compiling
from kubetrain.tooling.catalog import Entry, entries


def test_committed_yaml_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["compile", "--check"])
    captured = capsys.readouterr()
    assert rc == 0, f"stale compiled YAML; run `kubetrain compile`:\n{captured.err}"
    assert f"all {len(entries())} compiled YAML files are current" in captured.out


def test_every_entry_has_its_yaml_beside_its_source() -> None:
    for entry in entries():
        assert entry.yaml_path.parent == entry.source.parent
        assert entry.yaml_path.is_file(), f"{entry.yaml_path} missing; run `kubetrain compile`"
        assert entry.source.parent.name == ("components" if entry.kind == "component" else "pipelines")


def test_check_ignores_the_sdk_version_but_nothing_else(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    entry = Entry("component", "download_dataset")
    fresh = compiling.compile_text(entry)
    assert "sdkVersion: kfp-" in fresh
    copy = tmp_path / "download_dataset.yaml"
    monkeypatch.setattr(Entry, "yaml_path", property(lambda self: copy))

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
