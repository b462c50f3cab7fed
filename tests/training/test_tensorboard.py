"""TensorBoard logs, the eval interval and early stopping on eval patience (engine/training/tensorboard.py,
engine/training/callbacks.py EvalPatienceCallback, engine/training/run.py).

Real tiny runs on CPU; the event files are parsed back with engine.training.tensorboard.read_logdir (TFRecord
framing + tensorboardX's Event proto, CRC-checked), so the test needs no tensorboard package.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import allow_repack, fresh_grads, linear4bit_layers, load4, lora_grads, max_rel_diff, tiny_dir  # noqa: F401

from engine.config import TrainConfig
from engine.errors import ConfigError
from engine.models.bnb_safety import count_repacked
from engine.runs import read_events
from engine.training.run import run_training
from engine.training.tensorboard import generate_samples, read_logdir, sample_prompts, samples_markdown

TINY = dict(method="lora", base_model="builtin:compact-mini", dataset="builtin:instructions", micro_batch_size=4, max_seq_len=64,
            logging_steps=1, save_steps=100, eval_fraction=0.1, learning_rate=1e-3)


def test_run_writes_tensorboard_scalars_and_samples_at_eval_steps(runs_dir):
    cfg = TrainConfig(**{**TINY, "method": "full"}, max_steps=4, eval_steps=2, run_name="t-tb")
    run_dir = runs_dir / cfg.run_name
    done = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert done["type"] == "done" and done["steps"] == 4

    tb = read_logdir(run_dir / "tensorboard")
    for tag in ("train/loss", "train/perplexity", "train/learning_rate", "train/grad_norm", "memory/peak_gib", "eval/loss", "eval/perplexity"):
        assert tb.scalars.get(tag), f"missing scalar {tag}; have {sorted(tb.scalars)}"
    assert [s for s, _ in tb.scalars["train/loss"]] == [1, 2, 3, 4]
    # eval_steps=2 is honoured (save_steps=100 would never evaluate); the step-4 evaluation is also the final one
    assert [s for s, _ in tb.scalars["eval/loss"]] == [2, 4]
    for (_, loss), (_, ppl) in zip(tb.scalars["eval/loss"], tb.scalars["eval/perplexity"], strict=True):
        assert ppl == pytest.approx(torch.tensor(loss).exp().item(), rel=1e-4)
    assert all(v > 0 for _, v in tb.scalars["memory/peak_gib"])

    samples = tb.texts["samples/text_summary"]
    assert [s for s, _ in samples] == [2, 4]
    assert samples[0][1].count("**prompt") == 2 and "greedy continuation" in samples[0][1]
    assert "<|user|>" in samples[0][1] or "user" in samples[0][1]  # the prompt part of an eval chat row
    assert "method: full" in tb.texts["config/text_summary"][0][1]

    events = read_events(run_dir)
    # (the final evaluation is written twice: by EventsCallback.on_log and by train.py itself)
    assert [e["step"] for e in events if e["type"] == "eval"][:2] == [2, 4]
    sample_events = [e for e in events if e["type"] == "samples"]
    assert len(sample_events) == 2 and all(len(e["samples"]) == 2 for e in sample_events)
    assert all(set(s) == {"prompt", "output"} for s in sample_events[0]["samples"])


def test_sample_generations_can_be_turned_off_and_default_eval_follows_checkpoints(runs_dir):
    cfg = TrainConfig(**{**TINY, "save_steps": 2}, max_steps=2, sample_generations=False, run_name="t-tb-nosamples")
    run_dir = runs_dir / cfg.run_name
    run_training(cfg, run_dir, runs_dir=runs_dir)
    tb = read_logdir(run_dir / "tensorboard")
    assert [s for s, _ in tb.scalars["eval/loss"]] == [2]  # eval_steps=0: with the checkpoint at step 2 (also the final one)
    assert "samples/text_summary" not in tb.texts
    assert not [e for e in read_events(run_dir) if e["type"] == "samples"]


def _scripted_eval_losses(monkeypatch, losses):
    """Make each evaluation report the next loss of `losses` (a real evaluation runs first)."""
    from transformers import Trainer

    real = Trainer.evaluation_loop
    seq = iter(losses)

    def evaluation_loop(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        out.metrics["eval_loss"] = next(seq, 9.0)
        return out

    monkeypatch.setattr(Trainer, "evaluation_loop", evaluation_loop)


def test_early_stopping_on_eval_patience_stops_and_says_why(runs_dir, monkeypatch):
    # step 1: 3.0 (first), 2: 2.0 (better: counter reset), 3: 2.5 (worse: 1), 4: 2.4 (still not better than 2.0: 2) -> stop
    _scripted_eval_losses(monkeypatch, [3.0, 2.0, 2.5, 2.4, 2.3, 2.2, 2.1])
    cfg = TrainConfig(**{**TINY, "save_steps": 1}, max_steps=10, eval_steps=1, early_stopping_patience=2,
                      sample_generations=False, run_name="t-patience")
    run_dir = runs_dir / cfg.run_name
    done = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert done["type"] == "done" and done["steps"] == 4
    assert (run_dir / "adapter" / "adapter_config.json").exists()
    events = read_events(run_dir)
    stop = [e for e in events if e["type"] == "early_stop"]
    assert len(stop) == 1
    assert stop[0]["step"] == 4 and stop[0]["best_step"] == 2 and stop[0]["best_eval_loss"] == 2.0 and stop[0]["patience"] == 2
    assert any(e["type"] == "phase" and e["phase"].startswith("early stopping") for e in events)
    # the checkpoint of the best evaluation outlives save_total_limit=2 (the last two would be 3 and 4)
    assert {p.name for p in run_dir.iterdir() if p.name.startswith("checkpoint-")} == {"checkpoint-2", "checkpoint-4"}


def test_improving_eval_loss_never_stops_early(runs_dir, monkeypatch):
    _scripted_eval_losses(monkeypatch, [3.0, 2.9, 2.8, 2.7])
    cfg = TrainConfig(**TINY, max_steps=3, eval_steps=1, early_stopping_patience=1, sample_generations=False,
                      run_name="t-patience-improving")
    done = run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    assert done["steps"] == 3
    assert not [e for e in read_events(runs_dir / cfg.run_name) if e["type"] == "early_stop"]


def test_config_errors_for_bad_combinations():
    with pytest.raises(ConfigError, match="early_stopping_patience.*eval"):
        TrainConfig(early_stopping_patience=2, eval_fraction=0.0)
    TrainConfig(early_stopping_patience=2, eval_fraction=0.0, eval_dataset="builtin:dates")  # an eval dataset is enough
    with pytest.raises(ConfigError, match="eval_steps"):
        TrainConfig(eval_steps=-1)
    with pytest.raises(ConfigError, match="early_stopping_patience"):
        TrainConfig(early_stopping_patience=-1)


def test_patience_without_a_held_out_set_is_a_config_error(runs_dir, tmp_path):
    data = tmp_path / "five.jsonl"  # fewer than 10 rows: no eval fraction is held out
    data.write_text("\n".join(json.dumps({"instruction": f"say {i}", "output": f"{i}"}) for i in range(5)), encoding="utf-8")
    cfg = TrainConfig(**{**TINY, "dataset": str(data)}, max_steps=2, early_stopping_patience=1, run_name="t-patience-small")
    with pytest.raises(ConfigError, match="no eval set"):
        run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)


def test_training_args_eval_interval_and_best_metric():
    from engine.hardware.device import detect_device
    from engine.training.trainer import training_args

    device = detect_device()
    args = training_args(TrainConfig(save_steps=7), Path("/tmp/x"), device, torch.float32, has_eval=True)
    assert args.eval_steps == 7 and args.metric_for_best_model is None and not args.load_best_model_at_end
    args = training_args(TrainConfig(save_steps=7, eval_steps=3, early_stopping_patience=2), Path("/tmp/x"), device, torch.float32, has_eval=True)
    assert args.eval_steps == 3 and args.metric_for_best_model == "eval_loss" and args.greater_is_better is False
    assert training_args(TrainConfig(), Path("/tmp/x"), device, torch.float32, has_eval=False).eval_strategy == "no"


def test_sample_prompts_take_the_masked_prompt_or_half_a_text():
    chat = {"input_ids": [5, 6, 7, 8, 9], "labels": [-100, -100, -100, 8, 9]}
    text = {"input_ids": list(range(10, 20)), "labels": list(range(10, 20))}
    assert sample_prompts([chat, text, chat]) == [[5, 6, 7], list(range(10, 15))]
    md = samples_markdown([{"prompt": "<|user|>\nhi", "output": "there"}])
    assert "    <|user|>\n    hi" in md and "    there" in md


def test_generate_samples_on_a_4bit_model_leaves_it_safe_to_train(tiny_dir, fresh_grads):  # noqa: F811
    used = load4(tiny_dir)
    allow_repack(used.model)  # as if the guard had been lost: generate_samples must still leave no repacked layer
    used.model.train()
    prompt = used.tokenizer("the sky is")["input_ids"]
    out = generate_samples(used.model, used.tokenizer, [prompt], max_new_tokens=4)
    assert len(out) == 1 and out[0]["prompt"]
    assert used.model.training
    assert count_repacked(used.model) == 0 and not any(layer.support_avx512bf16_for_cpu for layer in linear4bit_layers(used.model))
    assert max_rel_diff(fresh_grads, lora_grads(used)) < 0.02  # the undo is best effort (bf16 block scales), see test_bnb_safety


def test_reader_survives_a_torn_last_record(tmp_path):
    from tensorboardX import SummaryWriter

    w = SummaryWriter(logdir=str(tmp_path))
    w.add_scalar("a/b", 1.5, 3)
    w.close()
    (path,) = tmp_path.glob("*tfevents*")
    path.write_bytes(path.read_bytes() + b"\x10\x00\x00")  # a run killed mid-write
    assert read_logdir(tmp_path).scalars == {"a/b": [(3, 1.5)]}


def test_resume_purges_what_a_killed_run_logged_after_its_checkpoint(tmp_path):
    from tensorboardX.proto.event_pb2 import Event, SessionLog
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from engine.hardware.device import detect_device
    from engine.training.tensorboard import TensorBoardLogCallback, _records

    cb = TensorBoardLogCallback(tmp_path / "tb", detect_device(), config_text="method: lora\n")
    state = TrainerState()
    state.global_step = 4  # resumed from checkpoint-4
    cb.on_train_begin(TrainingArguments(output_dir=str(tmp_path), report_to="none"), state, TrainerControl())
    cb.close()
    (path,) = (tmp_path / "tb").glob("*tfevents*")
    starts = [e.step for e in map(Event.FromString, _records(path)) if e.session_log.status == SessionLog.START]
    assert starts == [5]  # TensorBoard hides steps >= 5 of older files: the resumed run logs them again
    assert read_logdir(tmp_path / "tb").texts["config/text_summary"][0][0] == 4
