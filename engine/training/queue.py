"""The waiting line of training runs: runs asked for while another one trains wait their turn instead of being refused.

One machine trains one run at a time (two would share its memory and its cores). Where several people use one app (a
Space in demo mode, engine/space.py), engine/training/jobs.py `JobManager` puts a run asked for while another goes in
this line: its folder is made at once (config.yaml, owner) with a `queued` file holding the time it joined and whether
it resumes. The line is the queued folders in the order they joined, so it survives an app restart like the runs do.
The job manager's supervisor thread starts the first one when the machine is free, and also ends a run at the Space's
wall time (`deadline` file, written when it starts).

Expected wait (`expected_wait_s`): the running run's own ETA (from its progress events), plus one turn for every run
ahead in the line (the Space's wall time per run: an upper bound, since a run ends at it). This module only reads and
writes these small files: it imports `runs` only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..runs import RunSummary, atomic_write_text

QUEUED_FILE = "queued"
DEADLINE_FILE = "deadline"


@dataclass(frozen=True)
class Place:
    """A queued run's place in the line: its position (1 = next) and the expected wait in seconds (None: unknown)."""

    position: int
    wait_s: float | None


def enqueue(run_dir: Path, *, resume: bool) -> None:
    """Put the run in the line (after everyone already in it)."""
    atomic_write_text(Path(run_dir) / QUEUED_FILE, json.dumps({"time": time.time(), "resume": resume}) + "\n")


def entry(run_dir: Path) -> dict | None:
    """The run's line entry ({"time", "resume"}), None when it is not queued."""
    try:
        data = json.loads((Path(run_dir) / QUEUED_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"time": 0.0, "resume": False}  # a damaged entry still holds its place (first): it is not lost
    return data if isinstance(data, dict) else {"time": 0.0, "resume": False}


def claim(run_dir: Path) -> dict | None:
    """Take the run out of the line to start it, if nobody else did first (the rename succeeds for one caller only,
    even with two job managers or two processes on one runs folder); its entry, or None when another took it."""
    run_dir = Path(run_dir)
    found = entry(run_dir)
    taken = run_dir / f".{QUEUED_FILE}.taken"
    try:
        os.rename(run_dir / QUEUED_FILE, taken)
    except OSError:
        return None
    taken.unlink(missing_ok=True)
    return found or {"time": 0.0, "resume": False}


def leave(run_dir: Path) -> None:
    """Take the run out of the line (it starts now, or its owner cancelled it)."""
    (Path(run_dir) / QUEUED_FILE).unlink(missing_ok=True)


def line(run_dirs: list[Path]) -> list[Path]:
    """The queued runs among `run_dirs`, first in line first."""
    queued = [(e, d) for d in run_dirs if (e := entry(d)) is not None]
    return [d for e, d in sorted(queued, key=lambda x: (float(x[0].get("time", 0.0)), x[1].name))]


def remaining_s(running: RunSummary | None, now: float | None = None) -> float | None:
    """Seconds the running run still needs: its latest ETA, counted down since that event, at most until its deadline;
    None when nothing tells (no progress yet and no deadline)."""
    if running is None:
        return 0.0
    now = time.time() if now is None else now
    left = None
    last = running.last_progress or {}
    if last.get("eta_s") is not None:
        left = max(0.0, float(last["eta_s"]) - max(0.0, now - float(last.get("time", now))))
    until = deadline_of(running.path)
    if until is not None:
        left = max(0.0, until - now) if left is None else min(left, max(0.0, until - now))
    return left


def expected_wait_s(position: int, running: RunSummary | None, turn_s: float | None, now: float | None = None) -> float | None:
    """Expected wait of the run at `position` (1 = next): the running run's remaining time plus a turn per run ahead."""
    left = remaining_s(running, now)
    if left is None or (position > 1 and not turn_s):
        return None
    return left + (position - 1) * (turn_s or 0.0)


def set_deadline(run_dir: Path, seconds: float) -> float:
    """Record when the run must end (now + `seconds`); returns that time."""
    until = time.time() + seconds
    atomic_write_text(Path(run_dir) / DEADLINE_FILE, f"{until:.3f}\n")
    return until


def deadline_of(run_dir: Path) -> float | None:
    """When the run must end (its `deadline` file), None without one."""
    try:
        return float((Path(run_dir) / DEADLINE_FILE).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
