"""A NaN/inf training or eval loss ends the run as failed with plain advice (never a TypeError, never hours of NaN
logged as 0.0), writes no checkpoint of the diverged weights, and leaves the run resumable from its last good one."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from transformers import TrainerControl, TrainerState

from engine.config import TrainConfig
from engine.errors import TrainingDiverged
from engine.fields import to_dict
from engine.runs import checkpoints, read_events, summarize
from engine.training.callbacks import EvalPatienceCallback, NonFiniteLossCallback
from engine.training.run import run_training

FAST = dict(micro_batch_size=4, max_seq_len=64, logging_steps=1, eval_fraction=0.1)


def test_a_nan_loss_ends_the_run_through_the_cli(runs_dir, monkeypatch, tmp_path):
    """The loss becomes NaN from step 3 on (as an fp16 overflow makes it): the CLI records the run's `error` event (kind
    nan) at once, no checkpoint of the diverged weights is written, and checkpoint-2 stays the one to resume from."""
    from engine.cli import main
    from engine.training.loss import ScoredPositionsLoss

    real = ScoredPositionsLoss.compute_loss  # the run's loss (engine/training/trainer.py trainer_class)

    def overflowing(self, model, inputs, *args, **kwargs):
        loss = real(self, model, inputs, *args, **kwargs)
        if model.training and self.state.global_step >= 2:
            return loss * math.inf if isinstance(loss, torch.Tensor) else (loss[0] * math.inf, *loss[1:])
        return loss

    monkeypatch.setattr(ScoredPositionsLoss, "compute_loss", overflowing)
    cfg = TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", run_name="t-nan-loss",
                      max_steps=8, save_steps=2, learning_rate=1e-3, **FAST)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(to_dict(cfg)), encoding="utf-8")
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs_dir))
    run_dir = runs_dir / cfg.run_name
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    err = read_events(run_dir)[-1]
    assert err["type"] == "error" and err["kind"] == "nan", err
    assert err["message"].startswith("loss became ") and "at step 3 — " in err["message"] and "learning rate" in err["message"]
    assert "checkpoint-2" in err["message"]
    assert [step for step, _ in checkpoints(run_dir)] == [2]  # none at the NaN step
    s = summarize(run_dir, alive=False)
    assert s.state == "failed" and s.error_kind == "nan" and s.resumable


def test_nan_eval_loss_with_early_stopping_ends_with_a_message(runs_dir, monkeypatch):
    """The crash this fixes: early stopping formatted a NaN eval loss (None) with :.4f -> TypeError."""
    from transformers import Trainer

    real = Trainer.prediction_step

    def nan_eval(self, model, inputs, prediction_loss_only, ignore_keys=None):
        loss, logits, labels = real(self, model, inputs, prediction_loss_only, ignore_keys)
        return loss * math.nan, logits, labels

    monkeypatch.setattr(Trainer, "prediction_step", nan_eval)
    cfg = TrainConfig(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", run_name="t-nan-eval",
                      max_steps=6, save_steps=2, eval_steps=2, early_stopping_patience=1, learning_rate=1e-3, **FAST)
    run_dir = runs_dir / cfg.run_name
    with pytest.raises(TrainingDiverged, match=r"eval loss became NaN at step 2 — .*learning rate"):
        run_training(cfg, run_dir, runs_dir=runs_dir)
    assert not checkpoints(run_dir)  # the save at step 2 was skipped: its weights were judged by a NaN eval


def test_early_stopping_message_survives_a_nan_eval_loss():
    events: list[tuple[str, dict]] = []

    class Log:
        def write(self, type_, **data):
            events.append((type_, data))
            return data

    cb = EvalPatienceCallback(1, Log())
    state, control = TrainerState(), TrainerControl()
    state.global_step = 4
    state.best_metric, state.best_global_step = 1.5, 2  # NaN never improves on it: patience 1 stops now
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="unused", metric_for_best_model="eval_loss", greater_is_better=False, eval_strategy="steps",
                             eval_steps=1, report_to="none", use_cpu=True)
    cb.on_evaluate(args, state, control, metrics={"eval_loss": float("nan")})
    assert control.should_training_stop
    assert events[0][0] == "early_stop" and "now not a number, best 1.5000 at step 2" in events[1][1]["phase"]


def test_nonfinite_callback_stops_without_saving():
    cb, state, control = NonFiniteLossCallback(), TrainerState(), TrainerControl()
    state.global_step = 7
    control.should_save = True
    cb.on_log(None, state, control, logs={"loss": 2.5})
    assert cb.step is None and not control.should_training_stop
    cb.on_log(None, state, control, logs={"loss": float("inf")})
    assert (cb.step, cb.what, cb.value) == (7, "loss", "inf") and control.should_training_stop and not control.should_save
