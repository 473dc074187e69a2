"""`kubetrain compile` writes only where it should: never into an installed package, never a traceback for --out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from kubetrain.tooling import compiling, hub


def test_an_installed_kubetrain_is_not_rewritten_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a pip install looks like from here: the components' folder has no pyproject.toml beside it.
    installed = tmp_path / "site-packages" / "kubetrain"
    installed.mkdir(parents=True)
    monkeypatch.setattr(hub, "repo_root", lambda: installed)
    written: list[Any] = []

    def compile_all(*args: Any, **kwargs: Any) -> list[Any]:
        written.append(args)
        return []

    monkeypatch.setattr(compiling, "compile_all", compile_all)
    for args in (["compile"], ["compile", "pytorch_train"], ["compile", "--check"]):
        assert main(args) == ExitCode.INVALID_INPUT, args
        err = capsys.readouterr().err
        assert f"kubetrain is installed here ({installed}), not a checkout" in err
        assert "--out DIR" in err
    assert written == [], "the installed package's YAML was rewritten"


def test_an_out_dir_that_cannot_be_one_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    for out in (blocker, blocker / "below"):
        assert main(["compile", "--out", str(out), "pytorch_train"]) == ExitCode.INVALID_INPUT
        err = capsys.readouterr().err
        assert err.strip() == f"kubetrain compile: --out {out}: {blocker} is a file, not a directory; choose another"
    assert blocker.read_text() == "not a directory\n"
