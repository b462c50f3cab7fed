"""Same seed, same run: two CPU runs of one config give bit-identical losses (train and eval), gradient norms and
final weights, even when something else drew from the random generators before the second one (the built-in base's
pretraining, an earlier run in the same process); another seed gives another run."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from safetensors.torch import load_file

from engine.config import TrainConfig
from engine.runs import read_events
from engine.training.run import run_training

# dropout on (LoRA's default 0.05), packing on, an eval split, warmup: every random draw a run makes
FAST = dict(max_steps=4, micro_batch_size=4, max_seq_len=64, logging_steps=1, save_steps=100, eval_steps=2, eval_fraction=0.1,
            learning_rate=2e-3, sample_generations=False)


def _trace(run_dir) -> list:
    """What must be identical: each progress event's loss, gradient norm, lr and tokens, and each eval loss."""
    keep = {"progress": ("step", "loss", "grad_norm", "lr", "tokens_seen"), "eval": ("step", "eval_loss")}
    return [(e["type"], *[e[k] for k in keep[e["type"]]]) for e in read_events(run_dir) if e["type"] in keep]


def _weights(run_dir, output: str) -> dict[str, torch.Tensor]:
    return load_file(str(next((run_dir / output).glob("*.safetensors"))))


@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
def test_two_runs_with_one_seed_are_bit_identical(method, runs_dir):
    cfg = TrainConfig(method=method, base_model="builtin:compact-mini", dataset="builtin:corpus", run_name=f"seed-{method}-a", **FAST)
    run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    torch.rand(1000), random.random()  # the generators moved on, as by anything else in a process
    again = dataclasses.replace(cfg, run_name=f"seed-{method}-b")
    run_training(again, runs_dir / again.run_name, runs_dir=runs_dir)
    first, second = _trace(runs_dir / cfg.run_name), _trace(runs_dir / again.run_name)
    assert len(first) == 6 and first == second  # 4 steps, 2 evaluations: equal to the last bit
    output = "model" if method == "full" else "adapter"
    a, b = _weights(runs_dir / cfg.run_name, output), _weights(runs_dir / again.run_name, output)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    if method != "lora":
        return
    other = dataclasses.replace(cfg, run_name=f"seed-{method}-c", seed=cfg.seed + 1)
    run_training(other, runs_dir / other.run_name, runs_dir=runs_dir)
    assert _trace(runs_dir / other.run_name) != first
