"""Issue 48: a chatty program filled the disk through what the launcher relays.

A program printing 100 MB made a 141 MB `run.log` (and as much on `kubetrain run --json`'s
stderr): the pod's own log is capped, the launcher's relay of it was not. The relay now stops at
`Tuning.max_relayed_log_bytes`, says so, and at the end says what it left out and shows its last
lines; one overlong line is cut.
"""

from __future__ import annotations

import pytest

from kubetrain.launcher.relay import MAX_LINE_CHARS, TAIL_LINES, CappedRelay
from tests.unit.launcher_memory_backend import MemoryBackend, cond, launch, pod

pytestmark = pytest.mark.timeout(60)

CAP = 4096


def test_a_chatty_programs_log_is_relayed_up_to_the_cap_then_its_last_lines_at_the_end() -> None:
    backend = MemoryBackend()
    chatter = [f"step {i} loss {1 / (i + 1):.6f} " + "x" * 80 for i in range(2000)]  # about 200 KB

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Created"), cond("Running"))
        b.add_log("train-abc-master-0", *chatter, "final test_accuracy 0.97")
        b.wait_for_line("the launcher relays no more of it")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded"))
        b.set_conditions(cond("Created"), cond("Succeeded"))

    lines = launch(backend, script, tuning={"max_relayed_log_bytes": CAP})
    relayed = [line for line in lines if line.startswith("[train-abc-master-0] ")]
    before, after = relayed[:-TAIL_LINES], relayed[-TAIL_LINES:]
    assert sum(len(line) + 1 for line in before) <= CAP + len(before) * len("[train-abc-master-0] ")
    assert len(before) < 100  # not the 2,001 lines the program printed
    assert after[-1] == "[train-abc-master-0] final test_accuracy 0.97"  # the end of the log is shown
    summary = next(line for line in lines if "of the program's log were not relayed" in line)
    assert summary.startswith(f"[kubetrain: {2001 - len(before)} lines (")
    assert f"the last {TAIL_LINES}:" in summary
    at = lines.index(summary)
    assert lines[at + 1 : at + 1 + TAIL_LINES] == after  # right after what was left out
    assert sum(len(line) for line in lines) < CAP + 10_000  # everything the launcher wrote, not ~200 KB


def test_a_quiet_programs_log_is_relayed_whole_with_no_notice() -> None:
    said: list[str] = []
    relay = CappedRelay(said.append, max_bytes=CAP)
    for i in range(10):
        relay.line(f"line {i}")
    relay.finish()
    assert said == [f"line {i}" for i in range(10)]


def test_an_overlong_line_is_cut_and_lines_left_out_still_count_as_output() -> None:
    said: list[str] = []
    heard: list[int] = []
    relay = CappedRelay(said.append, max_bytes=MAX_LINE_CHARS * 2, heard=lambda: heard.append(1), where=lambda: "W")
    relay.line("y" * (MAX_LINE_CHARS + 5))
    assert said == ["y" * MAX_LINE_CHARS + " [kubetrain: 5 more characters of this line]"]
    relay.line("z" * MAX_LINE_CHARS)  # past the cap
    relay.line("last")
    assert len(said) == 2 and "relays no more" in said[1]
    assert heard == [1, 1]  # the silence notice must not think the program went quiet
    relay.finish()
    assert said[2].startswith("[kubetrain: 2 lines (") and "; W; the last 2:]" in said[2]
    assert said[3:] == ["z" * MAX_LINE_CHARS, "last"]
