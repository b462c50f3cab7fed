"""A mix of adapters as a job: the page's "Mix adapters" and `python -m engine mix` (engine/training/mix.py does the work).

The app starts `python -m engine mix --run-dir <run>` in its own process (`start_mix`), like a training run
(engine/training/jobs.py): its pid in `<run>/pid`, its output in `<run>/train.log`, its events in `<run>/events.jsonl`, so
the run shows as running, then finished, in the run history, and no training run or merge starts beside it (one job at a
time, under the job manager's lock). The refusals (engine/training/mix.py `plan_mix`) come before the run folder is made,
and on a shared app a visitor may mix only runs they started (`check_control`), and the mix is theirs.
"""

from __future__ import annotations

import json
import os
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import EngineError, JobError, Phrase
from ..fields import from_dict
from ..mix_config import MixConfig
from ..runs import EventLog, atomic_write_text, run_path
from .jobs import JobManager
from .mix import plan_mix, run_mix, write_mix_run
from .processes import proc_start_time


def new_mix_name(runs_dir: Path, cfg: MixConfig) -> str:
    """The mixed run's folder name: the one asked for, else `mix-<method>-<time>` (a free one)."""
    if cfg.run_name:
        return cfg.run_name
    base = f"mix-{cfg.combination.replace('_', '-')}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    name, i = base, 1
    while (Path(runs_dir) / name).exists():
        i += 1
        name = f"{base}-{i}"
    return name


def _fresh_folder(runs_dir: Path, name: str) -> Path:
    run_dir = run_path(runs_dir, name)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise JobError(key="message.jobs.name_taken", name=name)
    return run_dir


def start_mix(jobs: JobManager, cfg: MixConfig, owner: str | None = None) -> tuple[str, list[Phrase]]:
    """Start mixing the adapters of `cfg.parents` into a new run, in a subprocess; (its name, the warnings to show).
    Refused while a training run, a merge or another mix is going, for runs `owner` did not start (shared mode), and
    for mixes that cannot work (ConfigError naming the field, before anything is written)."""
    for parent in cfg.parent_list:
        if not jobs.may_control(parent, owner):
            raise JobError(key="mix.not_yours", name=parent)
    with jobs.lock:
        busy = jobs.active() or jobs.active_merge()
        if busy:
            raise JobError(key="mix.busy", busy=busy)
        plan = plan_mix(cfg, jobs.runs_dir)
        run_dir = _fresh_folder(jobs.runs_dir, new_mix_name(jobs.runs_dir, cfg))
        write_mix_run(plan, run_dir)
        jobs.record_owner(run_dir, owner)
        jobs.spawn(run_dir, [jobs.python, "-m", "engine", "mix", "--run-dir", str(run_dir)])
    return run_dir.name, plan.warnings


def mix_command(given: dict[str, Any], run_dir: str | None) -> int:
    """`python -m engine mix`: with `--run-dir`, make the mix prepared in that folder (the app's job); otherwise plan a new
    mix from the MixConfig flags in `given`, make its folder and mix in this process."""
    from ..refs import default_runs_dir

    runs_dir = default_runs_dir()
    if run_dir:
        folder = Path(run_dir).resolve()
    else:
        cfg = from_dict(MixConfig, given)
        plan = plan_mix(cfg, runs_dir)
        folder = _fresh_folder(runs_dir, new_mix_name(runs_dir, cfg))
        write_mix_run(plan, folder)
        pid = os.getpid()
        atomic_write_text(folder / "pid", f"{pid} {proc_start_time(pid) or ''}\n")  # the app shows it running meanwhile
    print(f"run folder: {folder}", flush=True)
    events = EventLog(folder / "events.jsonl")
    try:
        result = run_mix(folder, runs_dir)
    except EngineError as exc:
        events.write("error", kind="engine", message=str(exc), i18n=exc.to_record())
        raise
    except Exception as exc:  # noqa: BLE001 - record *why* the mix died for the page, then re-raise for the log
        events.write("error", kind="crash", message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-4000:])
        raise
    print(json.dumps(result, default=str), flush=True)
    return 0

