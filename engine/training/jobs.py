"""Training jobs as subprocesses: one at a time, stoppable, resumable, and found again after a restart.

The app never trains on its own threads. `JobManager.start` writes the run's config.yaml and launches
`python -m engine train --config <run>/config.yaml --run-dir <run>` in a new session (process group),
with stdout/stderr going to `<run>/train.log` (a file, never an undrained pipe). The process records
its pid in `<run>/pid`; status is read back from `events.jsonl`, so a reloaded page, a second browser or
a restarted app all see the same state. Stop asks politely (a STOP file: the run saves a checkpoint and
exits) and kills the whole process tree if it has not exited after a grace period.

Shared state: one JobManager per runs directory (ui/page.py), shared by all sessions; its lock serializes start/stop.

Merges are jobs too (`start_merge`): `python -m engine merge NAME` in its own process, writing `<run>/merge_events.jsonl` and
`<run>/merge.log`, its pid in `<run>/merge.pid`. They take the same lock, and neither a merge nor a training run starts while the
other is going (both would hold a copy of the model), nor while a job of `other_jobs` is busy (a benchmark: bench_job.py).

Who may act on a run: the one gate, engine/run_access.py. With `owner_only` (default: shared mode) a run started with
an `owner` key (the browser's, kept in its local storage, or an API caller's gradio session; stored hashed in
`<run>/owner`) is stopped, resumed, deleted, exported or trained from only with that key; a run started without one
(the CLI) by nobody through a shared app. In shared mode the training subprocess gets no Hugging Face token
(engine/sharing.py `child_env`).

A waiting line (`queue`, default: a Space in demo mode, engine/space.py): a run started or resumed while another one
goes waits its turn (engine/training/queue.py) instead of being refused, and a supervisor thread starts it when the
machine is free. In demo mode every run is checked against the Space's limits before its folder is made
(`space.check_train_config`; one visitor's runs in the line too), and is asked to stop (saving a checkpoint) at the
Space's wall time, killed a minute later.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from .. import run_access
from ..config import TrainConfig
from ..errors import JobError
from ..refs import DATA_REF_FIELDS, MODEL_REF_FIELDS, check_visitor_refs
from ..runs import RunSummary, atomic_write_text, run_path, save_config, summarize
from ..sharing import is_shared
from . import queue as waiting
from .processes import run_is_alive, spawn_logged

MERGE_PID, MERGE_EVENTS, MERGE_PREFIX = "merge.pid", "merge_events.jsonl", "merge:"


class JobManager:
    """Starts, stops and reports training runs under one runs directory."""

    def __init__(self, runs_dir: Path, *, python: str | None = None, stop_grace_s: float = 20.0, owner_only: bool | None = None,
                 queue: bool | None = None, poll_s: float = 2.0) -> None:
        from .. import space

        self.runs_dir = Path(runs_dir)
        self.owner_only = is_shared() if owner_only is None else owner_only  # None: decided by shared mode
        self.queue = space.demo_mode() if queue is None else queue  # None: a waiting line on a Space in demo mode
        self.poll_s = poll_s
        self._supervisor: threading.Thread | None = None
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.python = python or sys.executable
        self.stop_grace_s = stop_grace_s
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen] = {}  # children of this process (reaped on poll)
        self.other_jobs: list = []  # callables: a JobError while another kind of job holds a model, else None (bench_job.py)
        if self.queue and waiting.line(self.run_dirs()):  # runs still waiting from before a restart
            self._supervise()

    # ---- queries ---------------------------------------------------------------------------------

    def run_dirs(self) -> list[Path]:
        dirs = [p for p in self.runs_dir.iterdir() if p.is_dir() and not p.name.startswith((".", "_")) and (p / "config.yaml").exists()]
        return sorted(dirs, key=lambda p: p.stat().st_mtime, reverse=True)

    def _alive(self, run_dir: Path) -> bool:
        proc = self._procs.get(run_dir.name)
        if proc is not None and proc.poll() is not None:
            self._procs.pop(run_dir.name, None)
        return run_is_alive(run_dir)

    def active(self) -> str | None:
        """Name of the running job, if any (found from pid files, so it survives app restarts)."""
        for run_dir in self.run_dirs():
            if self._alive(run_dir):
                return run_dir.name
        return None

    def status(self, name: str) -> RunSummary:
        run_dir = run_path(self.runs_dir, name)
        if not (run_dir / "config.yaml").exists():
            raise JobError(key="message.jobs.no_run", name=name)
        return self._placed(summarize(run_dir, alive=self._alive(run_dir)))

    def list_runs(self) -> list[RunSummary]:
        return [self._placed(summarize(d, alive=self._alive(d))) for d in self.run_dirs()]

    def place(self, name: str) -> waiting.Place | None:
        """A queued run's position in the line and expected wait (engine/training/queue.py); None when not queued."""
        from .. import space

        line = waiting.line(self.run_dirs())
        names = [d.name for d in line]
        if name not in names:
            return None
        busy = self.active()
        running = summarize(run_path(self.runs_dir, busy), alive=True) if busy else None
        turn = space.limits().max_minutes * 60 if space.demo_mode() else None
        position = names.index(name) + 1
        return waiting.Place(position, waiting.expected_wait_s(position, running, turn))

    def _placed(self, summary: RunSummary) -> RunSummary:
        if summary.state == "queued":
            place = self.place(summary.name)
            if place is not None:
                summary.queue_position, summary.queue_wait_s = place.position, place.wait_s
                busy = self.active()
                if busy:
                    summary.queue_behind = busy
                    summary.queue_device = summarize(run_path(self.runs_dir, busy), alive=True).device
        return summary

    def finished_runs(self) -> list[RunSummary]:
        return [s for s in self.list_runs() if s.state == "finished" and s.output]

    # ---- actions ---------------------------------------------------------------------------------

    def new_run_name(self, cfg: TrainConfig) -> str:
        if cfg.run_name:
            return cfg.run_name
        base = f"{cfg.method}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        name, i = base, 1
        while (self.runs_dir / name).exists():
            i += 1
            name = f"{base}-{i}"
        return name

    def may_control(self, name: str, owner: str | None, action: str = "stop") -> bool:
        """May the holder of `owner` do `action` with run `name`? (engine/run_access.py, the one gate.)"""
        return run_access.may_access(self.runs_dir, name, owner, action, owner_only=self.owner_only)

    def check_control(self, name: str, owner: str | None, action: str) -> None:
        """Raise JobError unless `owner` may do `action` with run `name` (engine/run_access.py `check_run_access`)."""
        run_access.check_run_access(self.runs_dir, name, owner, action, plain=True, owner_only=self.owner_only)

    def start(self, cfg: TrainConfig, owner: str | None = None) -> str:
        """Start a new run; while another run (or a merge) is going, queue it (`queue`) or refuse. Returns the run name.
        `owner`: the key of the browser that starts it (only that key may stop it when `owner_only`). On a shared app the
        run's references go through the visitor gate first (engine/refs.py `check_visitor_refs`), whichever entry started
        it; on a Space in demo mode a run above the Space's limits is refused next, naming the limit (engine/space.py)."""
        from .. import space
        from .preflight import check_before_start, check_data_before_start
        check_visitor_refs({name: getattr(cfg, name, "") for name in (*MODEL_REF_FIELDS, *DATA_REF_FIELDS)})
        for ref, action in ((cfg.base_model, "train_from"), (cfg.teacher_model, "teacher")):  # a new run's zip would hand a base out
            run_access.check_run_access(self.runs_dir, ref, owner, action, owner_only=self.owner_only)
        space.check_train_config(cfg, self.runs_dir)  # before the lock: sizing a Hub model asks the Hub
        check_data_before_start(cfg)  # before the lock, reading the rows: data bound to fail never starts a run
        with self._lock:
            busy = self.active()
            waits = bool(busy or self.active_merge()) and self.queue
            if busy and not waits:
                raise JobError(key="message.jobs.busy_start", busy=busy)
            if not waits:
                self._refuse_while_merging()
            self._check_line(busy, waits, run_access.owner_hash(owner) if owner else None)
            name = self.new_run_name(cfg)
            run_dir = run_path(self.runs_dir, name)
            if run_dir.exists() and any(run_dir.iterdir()):
                raise JobError(key="message.jobs.name_taken", name=name)
            check_before_start(cfg, self.runs_dir)  # refusals before side effects: a refused config leaves no folder
            run_dir.mkdir(parents=True, exist_ok=True)
            save_config(run_dir, cfg)
            self.record_owner(run_dir, owner)
            if waits:
                waiting.enqueue(run_dir, resume=False)
                self._supervise()
            else:
                self._launch(run_dir, resume=False)
            return name

    def resume(self, name: str) -> str:
        """Continue a stopped, failed or killed run from its last complete checkpoint."""
        with self._lock:
            busy = self.active()
            waits = bool(busy or self.active_merge()) and self.queue
            if busy and not waits:
                raise JobError(key="message.jobs.busy_resume", busy=busy, name=name)
            if not waits:
                self._refuse_while_merging()
            summary = self.status(name)
            if summary.state in ("finished",):
                raise JobError(key="message.jobs.already_finished", name=name)
            if summary.state == "queued":
                return name
            self._check_line(busy, waits, run_access.recorded_owner(self.runs_dir, name), exclude=name)
            if waits:
                waiting.enqueue(summary.path, resume=True)
                self._supervise()
            else:
                self._launch(summary.path, resume=True)
            return name

    # ---- the waiting line and the Space's wall time -----------------------------------------------------

    def _check_line(self, busy: str | None, waits: bool, owner_hash: str | None, exclude: str = "") -> None:
        """On a Space in demo mode: one visitor's runs training or waiting, and the whole line, within the limits."""
        from .. import space, space_limits

        if self.queue and space.demo_mode():
            line = waiting.line(self.run_dirs())
            live = [*line, *([run_path(self.runs_dir, busy)] if busy else [])]
            space_limits.check_visitor_line(self.runs_dir, live, len(line) if waits else 0, owner_hash, exclude=exclude)

    def _supervise(self) -> None:
        """Start the supervisor thread unless it runs (called under the lock)."""
        if self._supervisor is None or not self._supervisor.is_alive():
            self._supervisor = threading.Thread(target=self._supervise_loop, name="jobs-supervisor", daemon=True)
            self._supervisor.start()

    def _supervise_loop(self) -> None:
        # Runs while anything is queued or a run has a deadline; a new one starts with the next queued run or deadline.
        while True:
            with self._lock:
                more = self.tick()
            if not more:
                return
            time.sleep(self.poll_s)

    def tick(self) -> bool:
        """One supervisor step (call it under the lock): stop a run past its deadline (kill it `space.KILL_GRACE_S`
        later), start the first queued run when the machine is free. Returns whether there is more to watch."""
        from .. import space

        busy = self.active()
        if busy:
            run_dir = run_path(self.runs_dir, busy)
            until = waiting.deadline_of(run_dir)
            if until is not None and time.time() > until:
                if not (run_dir / "STOP").exists():
                    atomic_write_text(run_dir / "STOP", "the Space's time limit\n")
                elif time.time() > until + space.KILL_GRACE_S:
                    self.kill(busy)
            return True
        line = waiting.line(self.run_dirs())
        if not line or self.active_merge() or any(check() for check in self.other_jobs):
            return bool(line)
        entry = waiting.claim(line[0])
        if entry is not None:  # None: another job manager started it first
            self._launch(line[0], resume=bool(entry.get("resume")))
        return True

    def retry_smaller_batch(self, name: str, owner: str | None = None) -> str:
        """After an out-of-memory failure: a new run with half the micro batch and twice the accumulation
        (the same effective batch, so the same training recipe), named after the failed one."""
        import dataclasses

        from ..runs import load_config

        summary = self.status(name)
        if summary.state != "failed" or summary.error_kind != "oom":
            raise JobError(key="message.jobs.not_oom", name=name)
        cfg = load_config(summary.path / "config.yaml")
        if cfg.micro_batch_size == 1:
            raise JobError(key="message.jobs.micro_batch_one")
        base = f"{name}-mb{cfg.micro_batch_size // 2}"
        new_name, i = base, 1
        while (self.runs_dir / new_name).exists():
            i += 1
            new_name = f"{base}-{i}"
        retry = dataclasses.replace(cfg, micro_batch_size=cfg.micro_batch_size // 2, grad_accum=cfg.grad_accum * 2, run_name=new_name)
        return self.start(retry, owner=owner)

    def _launch(self, run_dir: Path, *, resume: bool) -> None:
        from .. import space
        from ..hardware.distributed import launcher_argv
        from ..runs import load_config

        if space.demo_mode():  # the Space's wall time, from now (a resumed run gets a new turn)
            waiting.set_deadline(run_dir, space.limits().max_minutes * 60)
        cfg = load_config(run_dir / "config.yaml")
        # ddp/fsdp: accelerate's launcher starts one process per GPU, each running the same command (a new session
        # holds them all, so Stop's process-group kill reaches every rank)
        head = launcher_argv(self.python, cfg.gpus) if cfg.distributed != "none" else [self.python, "-m"]
        cmd = [*head, "engine", "train", "--config", str(run_dir / "config.yaml"), "--run-dir", str(run_dir)]
        if resume:
            cmd.append("--resume")
        (run_dir / "STOP").unlink(missing_ok=True)
        self.spawn(run_dir, cmd, env={"COMPACT_LAB_LAUNCHED_AT": repr(time.time())})  # a STOP written after this is for this process
        if space.demo_mode() or self.queue:
            self._supervise()

    def spawn(self, run_dir: Path, cmd: list[str], *, log_name: str = "train.log", pid_name: str = "pid", key: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start `cmd` for `run_dir` (processes.py `spawn_logged`: output to `<run>/log_name`, pid in `<run>/pid_name`), kept
        to be reaped under `key` (default: the run's name)."""
        proc = spawn_logged(cmd, run_dir / log_name, run_dir / pid_name, self.runs_dir, env=env)
        self._procs[key or run_dir.name] = proc
        return proc

    @property
    def lock(self) -> threading.Lock:  # held while a job starts (a run, a merge, a mix: engine/training/mix_job.py)
        return self._lock

    def record_owner(self, run_dir: Path, owner: str | None) -> None:  # `<run>/owner`, hashed (the module docstring)
        if owner:
            atomic_write_text(run_dir / run_access.OWNER_FILE, run_access.owner_hash(owner) + "\n")

    def stop(self, name: str, *, wait: bool = True) -> RunSummary:
        """Ask the run to save and stop; kill its process tree if it does not exit in time."""
        run_dir = run_path(self.runs_dir, name)
        if waiting.entry(run_dir) is not None:  # still waiting: it leaves the line, shown as stopped before its start
            with self._lock:
                waiting.leave(run_dir)
            from ..runs import EventLog

            EventLog(run_dir / "events.jsonl").write("stopped", step=0, checkpoint=None, message="left the queue")
            return self.status(name)
        if not self._alive(run_dir):
            return self.status(name)
        atomic_write_text(run_dir / "STOP", "stop requested\n")
        if not wait:
            return self.status(name)
        deadline = time.time() + self.stop_grace_s
        while time.time() < deadline and self._alive(run_dir):
            time.sleep(0.2)
        if self._alive(run_dir):
            self.kill(name)
        return self.status(name)

    def kill(self, name: str) -> None:
        """Kill the run's whole process group at once (SIGKILL). Resume picks up the last checkpoint."""
        run_dir = run_path(self.runs_dir, name)
        try:
            pid = int((run_dir / "pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if run_is_alive(run_dir):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.wait(timeout=10)
        (run_dir / "STOP").unlink(missing_ok=True)

    def delete(self, name: str) -> None:
        import shutil

        run_dir = run_path(self.runs_dir, name)
        if self._alive(run_dir):
            raise JobError(key="message.jobs.busy_delete", name=name)
        if not run_dir.exists():
            raise JobError(key="message.jobs.no_run", name=name)
        shutil.rmtree(run_dir)

    # ---- merges (one job at a time, like training) --------------------------------------------------

    def active_merge(self) -> str | None:
        """Name of the run whose adapter is being merged, if any (found from `merge.pid` files)."""
        for run_dir in self.run_dirs():
            proc = self._procs.get(MERGE_PREFIX + run_dir.name)
            if proc is not None and proc.poll() is not None:
                self._procs.pop(MERGE_PREFIX + run_dir.name, None)
            if run_is_alive(run_dir, pid_name=MERGE_PID):
                return run_dir.name
        return None

    def _refuse_while_merging(self) -> None:
        if merging := self.active_merge():
            raise JobError(key="message.jobs.merging", name=merging)
        for error in filter(None, (check() for check in self.other_jobs)):
            raise error

    def start_merge(self, name: str, *, device: str = "auto", dtype: str = "auto") -> None:
        """Merge a finished run's adapter in a subprocess (`python -m engine merge NAME --device DEVICE`), refused while a
        training run or another merge is going. device: "cpu" (the GPU cannot hold the unquantized base, or there is
        none: the child then never touches the GPU) or "auto" (the device policy, the GPU when there is one)."""
        if device not in ("auto", "cpu") or dtype not in ("auto", "fp16", "bf16", "fp32"):
            raise JobError(f"merge device {device!r} / dtype {dtype!r}: use device auto or cpu, dtype auto, fp16, bf16 or fp32.")
        with self._lock:
            busy = self.active()
            if busy:
                raise JobError(key="message.jobs.busy_merge", busy=busy)
            self._refuse_while_merging()
            summary = self.status(name)
            if summary.state != "finished":
                raise JobError(key="message.jobs.merge_unfinished", name=name)
            run_dir = summary.path
            cmd = [self.python, "-m", "engine", "merge", name, "--device", device, "--dtype", dtype]
            (run_dir / MERGE_EVENTS).unlink(missing_ok=True)  # the page shows this merge's events, not an earlier one's
            self.spawn(run_dir, cmd, log_name="merge.log", pid_name=MERGE_PID, key=MERGE_PREFIX + name,  # cpu: no CUDA context on the card
                       env={"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else None)

    def merge_events(self, name: str) -> list[dict]:
        """The events of the run's latest merge (merge_start, merge_done or merge_error), oldest first."""
        from ..runs import read_events

        return read_events(run_path(self.runs_dir, name), MERGE_EVENTS)
