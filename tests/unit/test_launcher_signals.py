"""Stop-signal handlers under a storm of signals: each one may be interrupted by the next.

Python runs a signal handler between any two bytecodes of the main thread, also inside a handler
that is still running. On a busy machine a storm of SIGTERM/SIGINT (an impatient user, a
supervisor repeating itself) does exactly that. Here the storm is made certain: every set() of
the event raises one more SIGTERM, whose handler runs inside that set().
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from kubetrain.launcher.signals import HANDLED_SIGNALS, CancelGuard, Cancelled, SignalEvent, hold_signals

pytestmark = pytest.mark.timeout(60)


def _set_in_a_storm(event: threading.Event) -> None:
    signal.raise_signal(signal.SIGTERM)  # its handler runs before raise_signal returns
    threading.Event.set(event)


class StormEvent(threading.Event):
    """An event whose every set() is interrupted by another SIGTERM."""

    def set(self) -> None:
        _set_in_a_storm(self)


@pytest.fixture(autouse=True)
def _restore_handlers() -> Iterator[None]:
    previous = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def test_held_signals_set_the_event_once_however_many_come(monkeypatch: pytest.MonkeyPatch) -> None:
    event = hold_signals()
    monkeypatch.setattr(SignalEvent, "set", _set_in_a_storm)
    signal.raise_signal(signal.SIGTERM)
    assert event.is_set() and event.signal_name == "SIGTERM"


def test_the_guard_records_a_storm_once() -> None:
    with CancelGuard(StormEvent()) as guard:
        signal.raise_signal(signal.SIGINT)  # not armed: recorded, acted on at the next check
        assert guard.event.is_set() and guard.signal_name == "SIGINT"
        with pytest.raises(Cancelled):
            guard.check()


def test_an_armed_guard_is_cancelled_once_by_a_storm() -> None:
    with CancelGuard(StormEvent()) as guard, pytest.raises(Cancelled) as stopped, guard.interruptible():
        signal.raise_signal(signal.SIGTERM)
    assert stopped.value.signal_name == "SIGTERM" and guard.event.is_set()


def test_sighup_stops_like_sigterm_unless_the_command_runs_under_nohup() -> None:
    """Issue 48: a closed terminal's SIGHUP killed `kubetrain run` at once, with no outcome."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    event = hold_signals()
    signal.raise_signal(signal.SIGHUP)
    assert event.is_set() and event.signal_name == "SIGHUP"
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts it
    hold_signals()
    with CancelGuard(threading.Event()):
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
