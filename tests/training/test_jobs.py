"""Jobs run as subprocesses: one at a time, found again by a new manager (app restart), kill -9 + resume."""

from __future__ import annotations

import os
import signal
import time

import pytest

from engine.config import LoraSettings, TrainConfig
from engine.errors import DataError, JobError
from engine.runs import last_complete_checkpoint, read_events
from engine.training.jobs import JobManager


def _wait(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _cfg(name, steps, **kw):
    base = dict(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=steps, micro_batch_size=4,
                max_seq_len=64, logging_steps=1, save_steps=3, eval_fraction=0.0, run_name=name)
    base.update(kw)
    return TrainConfig(**base)


def test_kill9_then_resume_finishes_with_same_steps(runs_dir):
    jobs = JobManager(runs_dir)
    name = jobs.start(_cfg("t-kill", 12))
    run_dir = runs_dir / name
    with pytest.raises(JobError, match="still training"):
        jobs.start(_cfg("t-second", 2))
    assert JobManager(runs_dir).active() == name  # a restarted app finds the running job
    _wait(lambda: (c := last_complete_checkpoint(run_dir)) is not None and int(c.name.split("-")[1]) >= 3, 240, "a checkpoint")
    pid = int((run_dir / "pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)  # kill -9, no chance to clean up
    _wait(lambda: jobs.status(name).state != "running", 30, "the process to die")
    s = jobs.status(name)
    assert s.state == "killed" and s.resumable
    jobs.resume(name)
    _wait(lambda: jobs.status(name).state in ("finished", "failed"), 300, "the resumed run")
    s = jobs.status(name)
    assert s.state == "finished", open(run_dir / "train.log").read()[-3000:]
    done = [e for e in read_events(run_dir) if e["type"] == "done"][-1]
    assert done["steps"] == 12
    starts = [e for e in read_events(run_dir) if e["type"] == "start"]
    assert starts[-1]["resumed_from"] is not None


def test_stop_request_saves_and_is_resumable(runs_dir):
    jobs = JobManager(runs_dir, stop_grace_s=120)
    name = jobs.start(_cfg("t-jobstop", 400, save_steps=1000))
    run_dir = runs_dir / name
    _wait(lambda: any(e["type"] == "progress" and e["step"] >= 2 for e in read_events(run_dir)), 240, "training to start")
    s = jobs.stop(name)
    assert s.state == "stopped", open(run_dir / "train.log").read()[-3000:]
    assert s.resumable and last_complete_checkpoint(run_dir) is not None
    jobs.delete(name)
    assert not run_dir.exists()


def test_stop_right_after_start_is_not_lost(runs_dir):
    """Stop clicked while the new process is still importing torch: the STOP file it finds is for it, not stale."""
    jobs = JobManager(runs_dir, stop_grace_s=120)
    name = jobs.start(_cfg("t-earlystop", 100_000, save_steps=1000))
    jobs.stop(name, wait=False)
    _wait(lambda: jobs.status(name).state != "running", 240, "the run to stop")
    s = jobs.status(name)
    assert s.state == "stopped", open(runs_dir / name / "train.log").read()[-3000:]
    jobs.delete(name)


def test_failed_run_reports_error(runs_dir):
    jobs = JobManager(runs_dir)
    with pytest.raises(DataError, match="missing.jsonl"):  # missing data: refused by Start itself, no run folder (issue 32)
        jobs.start(_cfg("t-missing", 2, dataset=str(runs_dir / "missing.jsonl")))
    assert not (runs_dir / "t-missing").exists()
    # what only the loaded model can say (LoRA targets it does not have) ends the started run as failed, with the message
    name = jobs.start(_cfg("t-fail", 2, lora=LoraSettings(targets="no_such_proj")))
    _wait(lambda: jobs.status(name).state != "running", 120, "the run to fail")
    s = jobs.status(name)
    assert s.state == "failed" and "no_such_proj" in (s.error or ""), s.error


def test_oom_retry_halves_micro_batch_and_keeps_effective_batch(runs_dir):
    from engine.runs import EventLog, load_config, save_config

    jobs = JobManager(runs_dir)
    run_dir = runs_dir / "t-oom"
    run_dir.mkdir()
    save_config(run_dir, _cfg("t-oom", 2, micro_batch_size=8, grad_accum=2))
    EventLog(run_dir / "events.jsonl").write("start")
    EventLog(run_dir / "events.jsonl").write("error", kind="oom", message="Out of memory.")
    assert jobs.status("t-oom").error_kind == "oom"
    new = jobs.retry_smaller_batch("t-oom")
    cfg = load_config(runs_dir / new / "config.yaml")
    assert (cfg.micro_batch_size, cfg.grad_accum) == (4, 4)
    _wait(lambda: jobs.status(new).state != "running", 240, "the retry")
    with pytest.raises(JobError, match="did not run out of memory"):
        jobs.retry_smaller_batch(new)
