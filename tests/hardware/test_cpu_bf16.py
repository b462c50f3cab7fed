"""bf16 where the CPU is fast at it: the cached micro-benchmark, the `auto` policy, fp32 master weights under the
Trainer's CPU AMP, and a real bf16 training step that learns like fp32."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from engine.hardware import cpu_bf16
from engine.hardware.device import DeviceInfo, master_dtype, precision_reason, resolve_dtype

CPU_FAST = DeviceInfo(kind="cpu", name="cpu-with-amx", total_gib=16.0, bf16=True, bf16_fast=True)
CPU_SLOW = DeviceInfo(kind="cpu", name="old-cpu", total_gib=16.0, bf16=True, bf16_fast=False)
T4 = DeviceInfo(kind="cuda", name="Tesla T4", total_gib=15.0, bf16=False, capability=(7, 5))
A100 = DeviceInfo(kind="cuda", name="A100", total_gib=40.0, bf16=True, capability=(8, 0), bf16_fast=True)


def test_auto_follows_the_cpu_measurement():
    assert resolve_dtype("auto", CPU_FAST) == torch.bfloat16
    assert resolve_dtype("auto", CPU_SLOW) == torch.float32
    assert resolve_dtype("bf16", CPU_SLOW) == torch.bfloat16  # chosen explicitly: really bf16
    assert resolve_dtype("auto", T4) == torch.float16 and resolve_dtype("auto", A100) == torch.bfloat16


@pytest.mark.parametrize(("method", "device", "dtype", "master"), [
    ("full", CPU_FAST, torch.bfloat16, torch.float32),     # CPU AMP: fp32 master weights
    ("scratch", CPU_FAST, torch.bfloat16, torch.float32),
    ("distill", CPU_FAST, torch.bfloat16, torch.float32),
    ("lora", CPU_FAST, torch.bfloat16, torch.bfloat16),    # a frozen base stays in the compute dtype
    ("qlora", CPU_FAST, torch.bfloat16, torch.bfloat16),
    ("full", T4, torch.float16, torch.float32),            # fp16 AMP on a GPU
    ("full", A100, torch.bfloat16, torch.bfloat16),
    ("full", CPU_SLOW, torch.float32, torch.float32),
])
def test_master_weights(method, device, dtype, master):
    assert master_dtype(method, dtype, device) == master


def test_forced_answer_and_reason(monkeypatch):
    monkeypatch.setenv(cpu_bf16.ENV_FORCE, "1")
    assert cpu_bf16.bf16_is_fast("any") and "COMPACT_LAB_CPU_BF16=1" in cpu_bf16.bf16_reason("any")
    monkeypatch.setenv(cpu_bf16.ENV_FORCE, "0")
    assert not cpu_bf16.bf16_is_fast("any")
    assert precision_reason(CPU_SLOW) == "bf16 off: set by COMPACT_LAB_CPU_BF16=0"
    assert precision_reason(T4) == "auto picks fp16 mixed precision: Tesla T4 (compute capability 7.5) has no bf16"


def test_measurement_is_cached_on_disk(monkeypatch, tmp_path):
    monkeypatch.delenv(cpu_bf16.ENV_FORCE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(cpu_bf16, "measure_speedup", lambda repeats=5: calls.append(1) or 3.0)
    cpu_bf16.bf16_speedup.cache_clear()
    try:
        assert cpu_bf16.bf16_is_fast("test-cpu") and calls == [1]
        cpu_bf16.bf16_speedup.cache_clear()  # a new process: reads the file, does not measure again
        assert cpu_bf16.bf16_speedup("test-cpu") == 3.0 and calls == [1]
        saved = json.loads((Path(tmp_path) / "compact-llm-lab" / "cpu_bf16.json").read_text())
        assert list(saved.values()) == [3.0] and "test-cpu" in next(iter(saved))
        assert "3.0x faster than fp32" in cpu_bf16.bf16_reason("test-cpu")
        monkeypatch.setattr(cpu_bf16, "measure_speedup", lambda repeats=5: 1.1)
        assert not cpu_bf16.bf16_is_fast("slow-cpu") and "not faster" in cpu_bf16.bf16_reason("slow-cpu")
    finally:
        cpu_bf16.bf16_speedup.cache_clear()


def test_measure_speedup_runs_in_milliseconds():
    import time

    start = time.perf_counter()
    speedup = cpu_bf16.measure_speedup(repeats=2)
    assert speedup >= 0.0 and time.perf_counter() - start < 5.0  # generous: a shared CI machine


def test_trainer_uses_cpu_amp_for_bf16(tmp_path):
    from engine.config import TrainConfig
    from engine.training.trainer import training_args

    args = training_args(TrainConfig(), tmp_path, CPU_FAST, torch.bfloat16, has_eval=False)
    assert args.bf16 and args.use_cpu and not args.fp16
    assert not training_args(TrainConfig(), tmp_path, CPU_SLOW, torch.float32, has_eval=False).bf16


def test_bf16_run_trains_fp32_master_weights_in_bf16_autocast(runs_dir, tmp_path, monkeypatch):
    """A full fine-tune with precision bf16 on CPU: the weights stay fp32 (master), matmuls run in bf16 (autocast),
    the start event says so, and the loss falls like fp32's."""
    from engine.config import TrainConfig
    from engine.runs import read_events
    from engine.training.run import run_training

    seen: set[tuple[torch.dtype, torch.dtype]] = set()  # (weight dtype, output dtype) of every linear layer call
    original = torch.nn.functional.linear

    def spy(x, w, b=None):
        out = original(x, w, b)
        seen.add((w.dtype, out.dtype))
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    base = TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:instructions", max_steps=3, micro_batch_size=8,
                       max_seq_len=64, logging_steps=1, save_steps=100, eval_fraction=0.1, learning_rate=1e-3)
    done = run_training(dataclasses.replace(base, precision="bf16"), tmp_path / "bf16", runs_dir=runs_dir)
    # training: fp32 weights computing in bf16 (autocast); evaluation may run outside autocast
    assert done["type"] == "done" and (torch.float32, torch.bfloat16) in seen and all(w == torch.float32 for w, _ in seen)
    start = next(e for e in read_events(tmp_path / "bf16") if e["type"] == "start")
    assert start["dtype"] == "bfloat16" and start["precision_note"] == "bf16, as chosen"
    fp32 = run_training(dataclasses.replace(base, precision="fp32"), tmp_path / "fp32", runs_dir=runs_dir)
    assert abs(done["eval_loss"] - fp32["eval_loss"]) / fp32["eval_loss"] < 0.02


def test_a_training_process_bounds_onednns_kernel_cache(monkeypatch):
    from engine.hardware.cpu_bf16 import KERNEL_CACHE_ENV, bound_kernel_cache

    monkeypatch.delenv(KERNEL_CACHE_ENV, raising=False)
    bound_kernel_cache()
    assert os.environ[KERNEL_CACHE_ENV] == "32"
    monkeypatch.setenv(KERNEL_CACHE_ENV, "256")  # the user's own setting wins
    bound_kernel_cache()
    assert os.environ[KERNEL_CACHE_ENV] == "256"
