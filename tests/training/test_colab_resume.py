"""Runs that outlive a disconnect: checkpoints appear whole or not at all (a process that dies mid-save leaves nothing
resume would pick), an interrupted run is found and offered for Resume (or resumed by --auto-resume), and
`python -m engine train --resume --run-dir` always continues with the run's own config.yaml."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from engine.config import TrainConfig
from engine.runs import CHECKPOINT_STAGING, checkpoints, is_complete_checkpoint, last_complete_checkpoint, read_events, save_config
from engine.training.jobs import JobManager
from engine.training.run import run_training

FAST = dict(micro_batch_size=4, max_seq_len=64, logging_steps=1, eval_fraction=0.1, learning_rate=1e-3)


class Disconnected(BaseException):
    """Stands for the runtime going away in the middle of writing a checkpoint."""


def test_a_save_cut_short_never_becomes_a_checkpoint_and_resume_ignores_it(runs_dir, monkeypatch):
    from transformers import Trainer

    real = Trainer._save_rng_state

    def dies_at_step_4(self, output_dir):  # called after the weights and optimizer were written, before trainer_state.json
        if self.state.global_step == 4:
            raise Disconnected
        return real(self, output_dir)

    monkeypatch.setattr(Trainer, "_save_rng_state", dies_at_step_4)
    cfg = TrainConfig(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", run_name="t-atomic", max_steps=6,
                      save_steps=2, **FAST)
    run_dir = runs_dir / cfg.run_name
    with pytest.raises(Disconnected):
        run_training(cfg, run_dir, runs_dir=runs_dir)
    # checkpoint-2 is whole and in place; checkpoint-4 exists only, half-written, in the staging folder
    assert [step for step, _ in checkpoints(run_dir)] == [2] and is_complete_checkpoint(run_dir / "checkpoint-2")
    partial = run_dir / CHECKPOINT_STAGING / "checkpoint-4"
    assert partial.is_dir() and any(partial.glob("*.safetensors")) and not is_complete_checkpoint(partial)
    assert last_complete_checkpoint(run_dir).name == "checkpoint-2"

    monkeypatch.setattr(Trainer, "_save_rng_state", real)
    done = run_training(cfg, run_dir, runs_dir=runs_dir, resume=True)
    assert done["type"] == "done" and done["steps"] == 6
    start = [e for e in read_events(run_dir) if e["type"] == "start"][-1]
    assert start["resumed_from"] == "checkpoint-2"
    assert not (run_dir / CHECKPOINT_STAGING).exists()
    assert {step for step, _ in checkpoints(run_dir)} >= {4, 6} and all(is_complete_checkpoint(p) for _, p in checkpoints(run_dir))


# ---- the CLI resumes with the run's own config ----

def _run_folder(runs: Path, name: str = "own-config") -> Path:
    run = runs / name
    run.mkdir(parents=True)
    save_config(run, TrainConfig(method="lora", run_name=name, learning_rate=5e-4, max_steps=7))
    return run


def test_resume_without_config_uses_the_runs_own(tmp_path, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path))
    run = _run_folder(tmp_path)
    assert main(["train", "--resume", "--run-dir", str(run), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "method: lora" in out and "learning_rate: 0.0005" in out and "max_steps: 7" in out
    # the app's own command passes --config <run>/config.yaml: the same file, accepted
    assert main(["train", "--resume", "--run-dir", str(run), "--config", str(run / "config.yaml"), "--print-config"]) == 0


@pytest.mark.parametrize(("flags", "named"), [
    (["--learning-rate", "0.01"], "--learning-rate"),
    (["--method", "full", "--max-steps", "3"], "--method, --max-steps"),
    (["--lora-r", "64"], "--lora-r"),
])
def test_resume_refuses_flags_that_change_the_config(tmp_path, monkeypatch, capsys, flags, named):
    from engine.cli import main

    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path))
    run = _run_folder(tmp_path)
    assert main(["train", "--resume", "--run-dir", str(run), *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and "its own" in err
    assert not (run / "events.jsonl").exists()  # nothing started


def test_resume_refuses_another_config_file_and_a_missing_run_dir(tmp_path, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path))
    run = _run_folder(tmp_path)
    other = tmp_path / "other.yaml"
    other.write_text("method: full\n", encoding="utf-8")
    assert main(["train", "--resume", "--run-dir", str(run), "--config", str(other)]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["train", "--resume"]) == 2
    assert "--run-dir" in capsys.readouterr().err
    assert main(["train", "--resume", "--run-dir", str(tmp_path / "nothing-here")]) == 2
    assert "nothing to resume" in capsys.readouterr().err


# ---- an interrupted run is found, offered, and resumed at start ----

def _interrupted(runs: Path, name: str, *, final: str | None = None, ckpt_step: int | None = 2) -> Path:
    run = _run_folder(runs, name)
    lines = [{"type": "start", "time": time.time()}, {"type": "progress", "step": 3, "max_steps": 7, "loss": 2.0, "time": time.time()}]
    if final:
        lines.append({"type": final, "time": time.time()})
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines), encoding="utf-8")
    (run / "pid").write_text("999999999 1\n", encoding="utf-8")  # a process that is gone
    if ckpt_step:
        ckpt = run / f"checkpoint-{ckpt_step}"
        ckpt.mkdir()
        (ckpt / "trainer_state.json").write_text("{}", encoding="utf-8")
        (ckpt / "adapter_model.safetensors").write_bytes(b"0")
    return run


def test_the_newest_interrupted_run_is_offered(tmp_path):
    from engine.views.run_view import interrupted_run, resume_offer

    jobs = JobManager(tmp_path)
    assert resume_offer(jobs) == (None, "")
    _interrupted(tmp_path, "finished-run", final="done")
    _interrupted(tmp_path, "stopped-run", final="stopped")  # stopped on purpose: resumable, but not "interrupted"
    assert interrupted_run(jobs) is None
    old = _interrupted(tmp_path, "old-cut")
    os.utime(old, (time.time() - 100, time.time() - 100))
    _interrupted(tmp_path, "new-cut")
    name, text = resume_offer(jobs)
    assert name == "new-cut" and "interrupted" in text and "checkpoint-2" in text and "Resume" in text


def test_auto_resume_resumes_the_newest_interrupted_run(tmp_path, monkeypatch):
    from engine.views.run_control import auto_resume

    jobs = JobManager(tmp_path)
    assert auto_resume(jobs) is None
    _interrupted(tmp_path, "cut-run")
    resumed = []
    monkeypatch.setattr(jobs, "resume", lambda name: resumed.append(name) or name)
    assert "cut-run" in auto_resume(jobs) and resumed == ["cut-run"]


def test_app_auto_resume_flag(tmp_path, monkeypatch, capsys):
    import app
    from engine.views import run_control

    calls = []

    class FakeDemo:
        def queue(self, **kw):
            return self

        def launch(self, **kw):
            calls.append("launch")

        def block_thread(self):  # launch(prevent_thread_lock=True) then block: the start-up hint prints in between
            pass

    monkeypatch.setattr(app, "build_app", lambda *a, **kw: FakeDemo())
    monkeypatch.setattr(run_control, "auto_resume", lambda jobs: calls.append(("resume", Path(jobs.runs_dir))) or "Resuming interrupted run 'x'")
    app.main(["--runs-dir", str(tmp_path), "--auto-resume"])
    assert calls == [("resume", tmp_path.resolve()), "launch"] and "Resuming interrupted run" in capsys.readouterr().out
    calls.clear()
    app.main(["--runs-dir", str(tmp_path)])
    assert calls == ["launch"]
