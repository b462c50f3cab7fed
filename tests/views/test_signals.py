"""Stop signals per browser session: one session's Stop never ends another's generation."""

from __future__ import annotations

import threading

from engine.views.signals import StopSignals


def test_stop_sets_only_that_sessions_current_event():
    signals = StopSignals()
    a, b = signals.fresh("a"), signals.fresh("b")
    signals.stop("a")
    assert a.is_set() and not b.is_set()
    a2 = signals.fresh("a")  # the next generation starts unstopped
    assert not a2.is_set()
    signals.stop("nobody")  # a session that never generated: nothing happens
    assert not b.is_set()


def test_sessions_from_many_threads():
    signals = StopSignals()
    events: dict[str, threading.Event] = {}

    def run(i: int) -> None:
        events[str(i)] = signals.fresh(str(i))
        if i % 2:
            signals.stop(str(i))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(int(k) for k, ev in events.items() if ev.is_set()) == [i for i in range(20) if i % 2]
