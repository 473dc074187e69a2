"""The elastic PS master's size decision: how many workers it asks for, between the bounds."""

from __future__ import annotations

import pytest

from kubetrain.errors import SpecError
from kubetrain.ps.master.scaling import Capacity, Scaler, desired_workers


@pytest.mark.parametrize(
    ("alive", "pending", "placeable", "size"),
    [
        (2, 0, True, 3),  # room and nothing starting: one more
        (4, 0, True, 4),  # at max_workers
        (2, 1, True, 3),  # a pod still starting where there is room: keep
        (3, 1, False, 3),  # the pending one cannot be placed: give it up
        (3, 0, False, 3),  # no room: stay
        (1, 1, False, 2),  # a preemption left fewer than min_workers: ask for the minimum, wait
        (0, 0, True, 2),  # nothing runs yet: the minimum
    ],
)
def test_the_size_asked_for(alive: int, pending: int, placeable: bool, size: int) -> None:
    seen = Capacity(alive=alive, pending=pending, placeable=placeable)
    assert desired_workers(min_workers=2, max_workers=4, seen=seen) == size


def test_the_scaler_says_when_it_grows_and_shrinks() -> None:
    scaler = Scaler(min_workers=1, max_workers=3)
    assert scaler.decide(Capacity(1, 0, True)) == (2, "grew to 2 workers")
    assert scaler.decide(Capacity(1, 1, True)) == (2, None)
    assert scaler.decide(Capacity(2, 0, True)) == (3, "grew to 3 workers")
    assert scaler.decide(Capacity(3, 0, True)) == (3, None)
    assert scaler.decide(Capacity(1, 2, False)) == (1, "shrank to 1 worker")


@pytest.mark.parametrize(("low", "high"), [(0, 2), (3, 2)])
def test_bad_bounds_are_refused(low: int, high: int) -> None:
    with pytest.raises(SpecError, match="min_workers, max_workers"):
        Scaler(min_workers=low, max_workers=high)
