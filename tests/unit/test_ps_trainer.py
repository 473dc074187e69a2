"""Worker-side pieces that need no peers: the straggler pacer and task progress."""

from __future__ import annotations

import pytest

from kubetrain.ps.worker.trainer import StragglerPacer, TaskProgress


def test_straggler_pacer_stretches_then_holds_a_fixed_pace() -> None:
    pacer = StragglerPacer(4.0)
    # Before calibration: each step stretched 4x.
    assert pacer.delay(0.5) == pytest.approx(1.5)
    for _ in range(StragglerPacer.WARMUP - 1 + StragglerPacer.CALIBRATION):
        pacer.delay(0.01)
    assert pacer.target == pytest.approx(0.04)
    # After: the pace stays 4x the calibrated step, even when steps get faster (peers left).
    assert pacer.delay(0.001) == pytest.approx(0.039)
    assert pacer.delay(0.05) == 0.0


def test_task_progress_start_and_clear() -> None:
    p = TaskProgress()
    p.start(7)
    p.records_done, p.abandon = 32, True
    p.start(8)
    assert (p.lease, p.records_done, p.abandon) == (8, 0, False)
    p.clear()
    assert p.lease == 0
