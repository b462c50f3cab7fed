"""Stop buttons for generation: one event per browser session, so one person's Stop never ends another's output."""

from __future__ import annotations

import threading


class StopSignals:
    """One threading.Event per browser session, so Stop ends that session's generation and nobody else's.

    Shared by every session (process-wide), guarded by its own lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, threading.Event] = {}

    def fresh(self, session: str) -> threading.Event:
        """A new, unset event for this session's next generation (replacing the last one)."""
        with self._lock:
            ev = self._events[session] = threading.Event()
            return ev

    def stop(self, session: str) -> None:
        """Set this session's current event, if it has one."""
        with self._lock:
            ev = self._events.get(session)
        if ev is not None:
            ev.set()
