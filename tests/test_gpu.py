"""CUDA-only checks (run on a GPU machine with `pytest -m gpu`): the QLoRA path with bitsandbytes on the GPU.

Skipped by default (pyproject's addopts deselects the `gpu` marker) and when no CUDA device is present.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_qlora_on_cuda_trains_generates_and_records_memory(runs_dir):
    from engine.config import GenerationSettings, QuantSettings, TrainConfig
    from engine.inference.generate import generate_text
    from engine.models.loading import load_model
    from engine.runs import read_events
    from engine.training.run import run_training

    loaded = load_model("builtin:compact-mini", QuantSettings(mode="4bit"), runs_dir=runs_dir)
    assert "Linear4bit" in {type(m).__name__ for m in loaded.model.modules()}
    assert loaded.dtype != torch.bfloat16 or torch.cuda.get_device_capability()[0] >= 8  # never bf16 on a T4

    cfg = TrainConfig(method="qlora", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=5, micro_batch_size=8,
                      max_seq_len=64, logging_steps=1, save_steps=5, run_name="gpu-qlora")
    done = run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    assert done["type"] == "done" and done["peak_gib"] > 0 and done["predicted_gib"]
    mem = [e for e in read_events(runs_dir / cfg.run_name) if e["type"] == "memory"]
    assert mem and mem[0]["predicted_gib"] > 0
    run = load_model("run:gpu-qlora", runs_dir=runs_dir)
    text = generate_text(run, "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", GenerationSettings(max_new_tokens=8, do_sample=False))
    assert isinstance(text, str)


def test_dtype_policy_on_this_card():
    """The family rule on real device properties: bf16 on Ampere+, else fp16, and fp32 for Gemma where there is no bf16."""
    from engine.hardware.device import detect_device, resolve_dtype

    device = detect_device()
    bf16 = torch.cuda.get_device_capability()[0] >= 8
    assert device.bf16 == bf16
    assert resolve_dtype("auto", device, model_type="llama") == (torch.bfloat16 if bf16 else torch.float16)
    assert resolve_dtype("auto", device, model_type="gemma2") == (torch.bfloat16 if bf16 else torch.float32)


def test_fp16_amp_qlora_with_atomic_checkpoints_on_cuda(runs_dir):
    """fp16 AMP (the T4 path, forced on any card) trains QLoRA with finite losses, and its checkpoints land whole."""
    from engine.config import TrainConfig
    from engine.runs import CHECKPOINT_STAGING, checkpoints, is_complete_checkpoint, read_events
    from engine.training.run import run_training

    cfg = TrainConfig(method="qlora", base_model="builtin:compact-mini", dataset="builtin:dates", precision="fp16", max_steps=6,
                      micro_batch_size=8, max_seq_len=64, logging_steps=1, save_steps=3, run_name="gpu-fp16-qlora")
    done = run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    assert done["type"] == "done"
    start = next(e for e in read_events(runs_dir / cfg.run_name) if e["type"] == "start")
    assert start["dtype"] == "float16"
    assert [s for s, _ in checkpoints(runs_dir / cfg.run_name)] == [3, 6]
    assert all(is_complete_checkpoint(p) for _, p in checkpoints(runs_dir / cfg.run_name))
    assert not (runs_dir / cfg.run_name / CHECKPOINT_STAGING).exists()
    # the grad scaler accelerate builds on a GPU (the same one engine/training/cpu_fp16.py installs on a CPU stand-in):
    # its scale in the progress events and its state in every checkpoint
    progress = [e for e in read_events(runs_dir / cfg.run_name) if e["type"] == "progress"]
    assert all(e["loss_scale"] > 0 and e["skipped_steps"] >= 0 for e in progress)
    assert all((p / "scaler.pt").exists() for _, p in checkpoints(runs_dir / cfg.run_name))
