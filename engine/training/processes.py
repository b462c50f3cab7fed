"""The processes of jobs (a training run, a merge, a mix, a benchmark): started in a new session with their output in
a log file and their pid recorded beside the job's files, and found alive again after the app restarts.

`spawn_logged` is how every job starts (engine/training/jobs.py for runs and merges, bench_job.py for benchmarks):
`<folder>/<log>` gets a header line and the process's stdout and stderr (a file, never an undrained pipe), `<folder>/<pid>`
gets "PID START_TIME" so that `run_is_alive` never takes a reused pid for the job's process. In shared mode the child
gets no Hugging Face token (engine/sharing.py `child_env`).
"""

from __future__ import annotations

import os
import subprocess
from datetime import datetime
from pathlib import Path

from ..runs import atomic_write_text
from ..sharing import child_env

REPO_ROOT = Path(__file__).resolve().parents[2]


def pid_alive(pid: int) -> bool:
    """Is process `pid` running (a zombie, exited and not yet reaped, is not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(") ", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def proc_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), recorded beside its pid in
    `<run>/pid` so that a reused pid is not taken for the run's process; None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def run_is_alive(run_dir: Path, *, pid_name: str = "pid") -> bool:
    """Is the process recorded in `<run>/pid` (or `<run>/merge.pid`) still running (and still the same process)?"""
    pid_file = Path(run_dir) / pid_name
    try:
        parts = pid_file.read_text().split()
        pid = int(parts[0])
    except (OSError, ValueError, IndexError):
        return False
    if not pid_alive(pid):
        return False
    recorded = parts[1] if len(parts) > 1 else None
    current = proc_start_time(pid)
    # pid reuse after a reboot: a different start time means a different process
    return recorded is None or current is None or recorded == current


def spawn_logged(cmd: list[str], log_path: Path, pid_path: Path, runs_dir: Path, *, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `cmd` from the repository in a new session (its own process group: a stop kills the whole tree), its output
    appended to `log_path` after a header line, "PID START_TIME" written to `pid_path`; the child's environment is this
    process's (without a Hub token in shared mode), then `env`, with COMPACT_LAB_RUNS=`runs_dir` and the repository on
    PYTHONPATH."""
    path = str(REPO_ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    full = {"PYTHONUNBUFFERED": "1", **child_env(os.environ), **(env or {}), "COMPACT_LAB_RUNS": str(runs_dir), "PYTHONPATH": path}
    with open(log_path, "ab") as logf:
        logf.write(f"\n=== {datetime.now().isoformat(timespec='seconds')} {' '.join(cmd[1:])}\n".encode())
        logf.flush()
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO_ROOT), env=full,
                                start_new_session=True)
    atomic_write_text(pid_path, f"{proc.pid} {proc_start_time(proc.pid) or ''}\n")
    return proc
