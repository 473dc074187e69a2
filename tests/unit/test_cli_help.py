"""`kubetrain --help` and `kubetrain run --help` speak to a user: what each command does, how to start."""

from __future__ import annotations

import pytest

from kubetrain.cli import main

COMMANDS = ("demo", "run", "submit", "compile", "render", "launch", "download")


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> list[str]:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out.splitlines()


def test_top_level_help_says_what_each_command_does(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _help(capsys, monkeypatch)
    text = "\n".join(lines)
    assert "dispatcher" not in text and "kubetrain.commands" not in text  # words for developers
    assert lines[2].startswith("Distributed training (PyTorch DDP, ChainerMN, parameter servers)")
    listed = [line.split()[0] for line in lines if line.startswith("    ") and line.split()[0] in COMMANDS]
    assert listed == list(COMMANDS)  # from trying it out to a cluster
    words = " ".join(text.split())  # argparse wraps each command's help
    assert "demo try it: train with PyTorch DDP, ChainerMN and parameter servers here and compare them" in words
    assert "run run a pipeline (a shipped one or your own .py/.yaml) on this machine, no cluster needed" in words
    assert "submit upload a pipeline (a shipped one or your own .py/.yaml) to Kubeflow Pipelines" in words
    # The first screen shows how to start with one's own pipeline, and what the exit codes mean.
    first_screen = "\n".join(lines[:40])
    assert "kubetrain run my_pipeline.py --list-params" in first_screen
    assert "kubetrain submit my_pipeline.py --host URL" in first_screen
    assert "5 cancelled" in first_screen


def test_run_help_starts_with_what_it_does_and_examples(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _help(capsys, monkeypatch, "run")
    assert (
        lines[0]
        == "usage: kubetrain run PIPELINE [--param KEY=VALUE ...] [--json] [--list-params] [--dry-run] [options]"
    )
    assert lines[2] == "Run a pipeline end to end on this machine: no cluster and no container needed."
    first_screen = "\n".join(lines[:24])
    assert "kubetrain run my_pipeline.py --list-params" in first_screen
    assert "a .py file defining a @dsl.pipeline function" in first_screen
    assert "--pipeline-func" in first_screen
    text = "\n".join(lines)
    for flag in ("--list-params", "--verbose", "--json", "--runs-dir", "--param", "--dry-run"):
        assert flag in text
    assert "5 when SIGTERM or SIGINT (Ctrl-C) stopped the run" in text
