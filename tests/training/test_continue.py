"""Continuing from a previous run (base model = run:NAME): a LoRA run trains the earlier adapter further instead of
stacking a second one, a full fine-tune trains the merged weights, and the result loads on the first base."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from engine.config import GenerationSettings, LoraSettings, TrainConfig
from engine.runs import read_events
from engine.training.run import run_training

FAST = dict(max_steps=2, micro_batch_size=4, max_seq_len=64, logging_steps=1, save_steps=50, eval_fraction=0.0, learning_rate=1e-2)


def _lora_weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))


def test_lora_run_continues_the_previous_adapter_and_full_merges_it(runs_dir):
    from peft import PeftModel

    from engine.inference.generate import generate_text
    from engine.models.loading import load_model

    first = TrainConfig(method="lora", base_model="builtin:compact-mini", dataset="builtin:instructions", run_name="c-first",
                        lora=LoraSettings(r=4, alpha=8, targets="attention"), **FAST)
    run_training(first, runs_dir / "c-first", runs_dir=runs_dir)
    # the form's LoRA settings differ on purpose: the continued adapter keeps its own shape
    second = TrainConfig(method="lora", base_model="run:c-first", dataset="builtin:instructions", run_name="c-second", **FAST)
    done = run_training(second, runs_dir / "c-second", runs_dir=runs_dir)
    assert done["type"] == "done"
    phases = [e.get("phase", "") for e in read_events(runs_dir / "c-second") if e["type"] == "phase"]
    assert any("continuing the previous run's adapter (r=4" in p for p in phases)

    a, b = _lora_weights(runs_dir / "c-first"), _lora_weights(runs_dir / "c-second")
    assert set(a) == set(b)  # same adapter shape and modules: continued, not a new one stacked on top
    assert any(not torch.equal(a[k], b[k]) for k in a)  # ...and trained further

    loaded = load_model("run:c-second", runs_dir=runs_dir)
    assert isinstance(loaded.model, PeftModel) and list(loaded.model.peft_config) == ["default"]
    assert "LoRA adapter on built-in compact-mini" in loaded.where and "c-first" not in loaded.where
    assert isinstance(generate_text(loaded, "Olá", GenerationSettings(max_new_tokens=4, do_sample=False)), str)

    full = TrainConfig(method="full", base_model="run:c-first", dataset="builtin:instructions", run_name="c-full", **FAST)
    assert run_training(full, runs_dir / "c-full", runs_dir=runs_dir)["type"] == "done"
    assert (runs_dir / "c-full" / "model" / "config.json").exists()
    assert not isinstance(load_model("run:c-full", runs_dir=runs_dir).model, PeftModel)
