"""Benchmark jobs as subprocesses, beside training: `python -m engine bench ...` (lm-evaluation-harness, engine/inference/harness.py)
in its own process group, its events in `<folder>/bench_events.jsonl`, its log in `<folder>/bench.log`, its pid in
`<folder>/bench.pid` (the folder: engine/benchmarks.py, a run's `benchmarks/` or `<runs>/_benchmarks/<model>-<precision>/`).

One job at a time beside training: a benchmark holds a copy of a model as a training run or a merge does, so `BenchJobs.start` is
refused while either goes (under the job manager's lock), and the job manager refuses them while a benchmark goes (this module
registers its check in `JobManager.other_jobs`). Before anything starts the job is sized by the memory estimator
(`plan_bench`: the precision that fits, or a refusal naming the estimate and the card) and the optional package is checked.

Stop kills the process tree at once (a benchmark has nothing to save: each finished task's result is already written), and
records a `bench_stopped` event; starting the same job again skips the tasks already done (a restart, not a resume).
Who may stop it: the browser that started it, on a shared app (its key, hashed, in `<folder>/owner`), as for runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from ..benchmarks import BASE_FOLDER, RUN_FOLDER, parse_task_names
from ..config import BenchConfig
from ..errors import JobError
from ..inference.harness import BenchPlan, bench_folder, plan_bench, require_harness, run_bench
from ..refs import check_visitor_refs, default_runs_dir
from ..run_access import OWNER_FILE, owner_hash
from ..runs import EventLog, atomic_write_text, read_events
from .jobs import JobManager
from .processes import proc_start_time, run_is_alive, spawn_logged

BENCH_PID, BENCH_EVENTS, BENCH_LOG = "bench.pid", "bench_events.jsonl", "bench.log"
OWNER = OWNER_FILE  # <folder>/owner: the starter's key hashed as a run's owner file is (engine/run_access.py)


class BenchJobs:
    """Starts, stops and finds benchmark jobs under the job manager's runs directory (one per page, shared by its sessions)."""

    def __init__(self, jobs: JobManager) -> None:
        self.jobs, self.runs_dir = jobs, jobs.runs_dir
        self._procs: dict[Path, subprocess.Popen] = {}  # children of this process (reaped on poll)
        self._lock = threading.Lock()
        jobs.other_jobs.append(self.busy_error)

    def folders(self) -> list[Path]:
        """Every benchmark folder: each run's `benchmarks/` and each model's folder under `_benchmarks/`."""
        runs = [d / RUN_FOLDER for d in self.jobs.run_dirs() if (d / RUN_FOLDER).is_dir()]
        base = self.runs_dir / BASE_FOLDER
        return runs + sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else runs

    def active(self) -> Path | None:
        """The folder of the running benchmark job, if any (from its pid file, so it survives an app restart)."""
        for folder, proc in list(self._procs.items()):
            if proc.poll() is not None:
                self._procs.pop(folder, None)
        return next((f for f in self.folders() if run_is_alive(f, pid_name=BENCH_PID)), None)

    def busy_error(self) -> JobError | None:
        """The job manager's check (JobManager.other_jobs): why a training run or a merge must wait, or None."""
        folder = self.active()
        return JobError(key="bench.error.busy_benchmark", model=model_of(folder)) if folder else None

    def start(self, cfg: BenchConfig, owner: str | None = None) -> Path:
        """Size the job, then launch it; returns its folder. Refused (JobError / EngineError, nothing written) when the harness is
        missing, the model would not fit, or a training run, a merge or another benchmark is going."""
        from ..models.references import resolve_model
        from ..sharing import is_shared

        require_harness()
        check_visitor_refs({"base_model": cfg.model})  # a shared app: no server paths
        resolve_model(cfg.model, self.runs_dir, not is_shared())  # an unknown run or built-in model: its own message, now
        plan = plan_bench(cfg, self.runs_dir)
        with self.jobs._lock, self._lock:  # noqa: SLF001 - the job manager's lock: a training start and this one never interleave
            if busy := self.jobs.active():
                raise JobError(key="bench.error.busy_training", busy=busy)
            if merging := self.jobs.active_merge():
                raise JobError(key="message.jobs.merging", name=merging)
            if running := self.active():
                raise JobError(key="bench.error.busy_benchmark", model=model_of(running))
            folder = bench_folder(self.runs_dir, cfg.model, plan.mode)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / BENCH_EVENTS).unlink(missing_ok=True)  # the page shows this job's events, not an earlier one's
            if owner:
                atomic_write_text(folder / OWNER, owner_hash(owner) + "\n")
            self._launch(folder, cfg, plan)
        return folder

    def _launch(self, folder: Path, cfg: BenchConfig, plan: BenchPlan) -> None:
        cmd = [self.jobs.python, "-m", "engine", "bench", "--model", cfg.model, "--tasks", ",".join(parse_task_names(cfg.tasks)),
               "--limit", str(cfg.limit), "--quant", plan.mode, "--batch-size", str(cfg.batch_size),
               "--with-base" if cfg.with_base else "--no-with-base"]
        proc = spawn_logged(cmd, folder / BENCH_LOG, folder / BENCH_PID, self.runs_dir)  # shared mode: no Hub token in a visitor's job
        self._procs[folder] = proc

    def may_control(self, folder: Path, owner: str | None) -> bool:
        """May the holder of `owner` stop the job in `folder`? (Anyone on a local app; its starter on a shared one.)"""
        if not self.jobs.owner_only:
            return True
        try:
            recorded = (folder / OWNER).read_text(encoding="ascii").strip()
        except OSError:
            return False
        return bool(owner) and owner_hash(owner) == recorded

    def stop(self, owner: str | None = None) -> Path | None:
        """Kill the running benchmark's process tree (its finished tasks are kept: starting it again skips them); returns its
        folder, None when none runs."""
        folder = self.active()
        if folder is None:
            return None
        if not self.may_control(folder, owner):
            raise JobError(key="bench.error.not_yours")
        try:
            pid = int((folder / BENCH_PID).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return folder
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        proc = self._procs.pop(folder, None)
        if proc is not None:
            proc.wait(timeout=10)
        deadline = time.time() + 10
        while run_is_alive(folder, pid_name=BENCH_PID) and time.time() < deadline:
            time.sleep(0.1)
        EventLog(folder / BENCH_EVENTS).write("bench_stopped")
        return folder

    def events(self, folder: Path) -> list[dict]:
        """The events of the latest job in `folder`, oldest first."""
        return read_events(folder, BENCH_EVENTS)


def model_of(folder: Path) -> str:
    """The model a benchmark folder belongs to, as the page names it: run:NAME for a run's, the folder name under _benchmarks."""
    return f"run:{folder.parent.name}" if folder.name == RUN_FOLDER else folder.name


def cmd_bench(cfg: BenchConfig, runs_dir: Path | None = None) -> int:
    """`python -m engine bench`: size the job, run the base (for a run, with_base) and the model, print the table. The events go
    to the folder's bench_events.jsonl (the page reads them); the job manager started it, or a terminal did."""


    runs_dir = Path(runs_dir or default_runs_dir())
    require_harness()
    plan = plan_bench(cfg, runs_dir)
    folder = bench_folder(runs_dir, cfg.model, plan.mode)
    folder.mkdir(parents=True, exist_ok=True)
    own_pid = not run_is_alive(folder, pid_name=BENCH_PID)  # started from a terminal (or in-process): the app sees it as busy too
    if own_pid:
        atomic_write_text(folder / BENCH_PID, f"{os.getpid()} {proc_start_time(os.getpid()) or ''}\n")
    try:
        return _run(cfg, runs_dir, plan, folder)
    finally:
        if own_pid:  # this process may live on (a test, a notebook): it no longer holds the machine
            (folder / BENCH_PID).unlink(missing_ok=True)


def _run(cfg: BenchConfig, runs_dir: Path, plan: BenchPlan, folder: Path) -> int:
    import json

    from ..errors import EngineError

    log = EventLog(folder / BENCH_EVENTS)

    def emit(type_: str, **fields: object) -> None:
        event = log.write(type_, **fields)
        if type_ != "bench_progress":
            print(json.dumps(event, default=str), flush=True)

    emit("bench_start", model=cfg.model, base=plan.base if cfg.with_base else None, tasks=parse_task_names(cfg.tasks), limit=cfg.limit,
         mode=plan.mode, need_gib=plan.need_gib, room_gib=round(plan.room_gib, 1), device=plan.device)
    t0 = time.time()
    try:
        results = run_bench(cfg, runs_dir, plan, emit)
    except EngineError as exc:
        emit("bench_error", message=str(exc), i18n=exc.to_record())
        raise
    except Exception as exc:  # noqa: BLE001 - record why the job died for the page, then re-raise for the log
        emit("bench_error", message=f"{type(exc).__name__}: {exc}")
        raise
    emit("bench_done", seconds=round(time.time() - t0, 1))
    for task in parse_task_names(cfg.tasks):
        cells = [f"{side} {_pct(results[side].get(task))}" for side in ("base", "model") if side in results]
        print(f"{task:24s} " + "   ".join(cells), flush=True)
    return 0


def _pct(result: dict | None) -> str:
    if not result or result.get("value") is None:
        return "-"
    err = f" ± {100 * result['stderr']:.1f}" if result.get("stderr") is not None else ""
    return f"{100 * result['value']:.1f}%{err} ({result.get('metric')}, n={result.get('n')})"
