"""tools/cluster/build_script.py: what a build script's caller gets back, and what it is told when one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.cluster import build_script


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "build.sh"
    script.write_text("set -eu\n" + body)
    return script


def test_the_folder_is_the_last_line_printed_and_the_log_keeps_both_streams(tmp_path: Path) -> None:
    script = _script(tmp_path, 'echo "fetching" >&2\necho "phase build:x: 3 s"\necho /cache/pieces/abc\n')
    log = tmp_path / "logs" / "build.log"
    assert build_script.build(script, log) == Path("/cache/pieces/abc")
    assert "fetching" in log.read_text() and "phase build:x" in log.read_text()


def test_a_failed_piece_is_named_in_the_error(tmp_path: Path) -> None:
    script = _script(
        tmp_path, 'echo "kfp: FAILED building driver (kfp ./backend/src/v2/cmd/driver)"\necho boom >&2\nexit 1\n'
    )
    with pytest.raises(build_script.BuildScriptError, match=r"FAILED building driver .*\n.*boom"):
        build_script.build(script)


def test_a_script_that_prints_no_folder_is_an_error_not_an_index_error(tmp_path: Path) -> None:
    with pytest.raises(build_script.BuildScriptError, match="printed no folder"):
        build_script.build(_script(tmp_path, "true\n"))


def test_printed_folder_is_none_when_the_script_cannot_say(tmp_path: Path) -> None:
    script = _script(tmp_path, 'if [ "$1" = --print-bin ]; then echo /cache/bin; else exit 2; fi\n')
    assert build_script.printed_folder(script, "--print-bin") == Path("/cache/bin")
    assert build_script.printed_folder(script, "--print-dir") is None
