"""Stop is honoured in every phase: the built-in base's pretraining listens to the STOP file of the run that asked for
it, a Stop before training proper ends the run as stopped (resumable), not failed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.errors import RunStopped
from engine.runs import EventLog


def test_the_pretraining_stops_on_the_parent_runs_stop_file(tmp_path):
    from engine.training.callbacks import StopFileCallback

    parent_stop = tmp_path / "parent" / "STOP"
    cb = StopFileCallback(tmp_path / "_builtin" / "STOP", parent_stop)
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    cb.on_step_end(None, None, control)
    assert not control.should_training_stop
    parent_stop.parent.mkdir()
    parent_stop.write_text("stop")
    cb.on_step_end(None, None, control)
    assert cb.stopped and control.should_training_stop and control.should_save  # a checkpoint first, then it ends


def test_a_stopped_pretraining_stops_the_run_that_asked_for_it(tmp_path):
    from engine.training.builtin import ensure_builtin

    parent = EventLog(tmp_path / "run" / "events.jsonl")
    with pytest.raises(RunStopped, match="Stopped while pretraining the built-in model 'compact-course'"):  # not shipped pretrained
        ensure_builtin("compact-course", tmp_path, parent, pretrain=lambda *a, **k: {"type": "stopped"})


def test_a_stop_between_phases_raises_run_stopped(tmp_path):
    from engine.training.run import _stop_requested  # the phase check itself, without loading a model

    run = SimpleNamespace(run_dir=tmp_path / "run")
    run.run_dir.mkdir()
    _stop_requested(run, None, "preparing the data")  # no STOP file: goes on
    mirror = EventLog(tmp_path / "parent" / "events.jsonl")
    (tmp_path / "parent" / "STOP").write_text("stop")
    with pytest.raises(RunStopped, match="Stopped while preparing the data"):
        _stop_requested(run, mirror, "preparing the data")


def test_the_cli_records_a_stop_before_training_as_stopped_and_resumable(tmp_path, monkeypatch):
    import engine.training.run as run_module
    from engine.cli import main
    from engine.training.jobs import JobManager

    def stopped(*args, **kwargs):
        raise RunStopped("Stopped while preparing the data; Resume starts it again.")

    monkeypatch.setattr(run_module, "run_training", stopped)
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text("method: lora\nbase_model: builtin:compact-mini\ndataset: builtin:dates\n")
    assert main(["train", "--config", str(tmp_path / "r" / "config.yaml"), "--run-dir", str(tmp_path / "r")]) in (0, None)
    summary = JobManager(tmp_path).status("r")
    assert summary.state == "stopped" and summary.restartable and not summary.resumable  # no checkpoint: starts again
