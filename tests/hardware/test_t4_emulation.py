"""COMPACT_LAB_EMULATE_T4=1 on the CPU: what the switch changes in device detection, with torch.cuda monkeypatched as an
H200 (engine/hardware/t4.py). The same decisions then run on real CUDA in the GPU kit's T4 section (bench/gpu_kit)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.hardware import coexist, t4
from engine.hardware import device as device_mod
from engine.hardware.device import detect_device, precision_reason, resolve_dtype
from engine.hardware.startup import device_lines

H200_BYTES = 150_754_820_096  # torch.cuda.get_device_properties(0).total_memory on an H200 (140.4 GiB)


@pytest.fixture
def h200(monkeypatch):
    """torch.cuda as an H200 would answer; records the memory-fraction calls."""
    calls: list[tuple[float, int]] = []
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=H200_BYTES)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: props)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda fraction, device=None: calls.append((fraction, device)))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (130 * 2**30, H200_BYTES))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 4 * 2**30)
    return calls


def test_without_the_switch_the_real_card_is_reported(h200, monkeypatch):
    monkeypatch.delenv(t4.ENV_EMULATE_T4, raising=False)
    dev = detect_device()
    assert (dev.name, dev.capability, dev.bf16) == ("NVIDIA H200", (9, 0), True)
    assert dev.total_gib == pytest.approx(H200_BYTES / 2**30)
    assert resolve_dtype("auto", dev, model_type="llama") == torch.bfloat16
    assert h200 == []  # no cap
    assert coexist.cuda_free_gib() == pytest.approx(130.0)
    assert t4.emulated_max_memory() is None


def test_the_switch_reports_a_t4_and_caps_the_process(h200, monkeypatch):
    monkeypatch.setenv(t4.ENV_EMULATE_T4, "1")
    dev = detect_device()
    assert dev.kind == "cuda" and dev.capability == (7, 5) and not dev.bf16 and not dev.bf16_fast
    assert dev.total_gib == 15.0
    assert dev.name.startswith("Tesla T4") and "NVIDIA H200" in dev.name and "COMPACT_LAB_EMULATE_T4=1" in dev.name
    # the cap: a T4's usable 14.7 GiB of the H200's memory, on device 0
    (fraction, index), = h200
    assert index == 0 and fraction * H200_BYTES / 2**30 == pytest.approx(14.7)


def test_under_the_switch_the_t4_decisions_are_taken(h200, monkeypatch):
    monkeypatch.setenv(t4.ENV_EMULATE_T4, "1")
    dev = detect_device()
    assert resolve_dtype("auto", dev, model_type="llama") == torch.float16  # fp16 with the grad scaler
    assert resolve_dtype("auto", dev, model_type="gemma2") == torch.float32  # Gemma: fp32, as on a T4
    with pytest.raises(device_mod.ConfigError, match="7.5"):
        resolve_dtype("bf16", dev, model_type="llama")
    assert "7.5" in precision_reason(dev, "llama") and "fp16" in precision_reason(dev, "llama")
    assert device_lines(dev, gpus=[], lang="en")[0].count("15.0") == 1  # the start-up line shows the T4's memory


def test_free_memory_and_the_offload_budget_are_a_t4s(h200, monkeypatch):
    monkeypatch.setenv(t4.ENV_EMULATE_T4, "1")
    # 4 GiB reserved by torch under a 14.7 GiB cap leaves 10.7, not the H200's 130 free
    assert coexist.cuda_free_gib() == pytest.approx(10.7)
    budget = t4.emulated_max_memory()
    assert budget[0] == "14.7GiB" and budget.get("cpu", "1GiB").endswith("GiB")


def test_merge_placement_follows_the_emulated_memory(h200, monkeypatch, tmp_path):
    """The merge plan reads the free memory the cap leaves: a base that fits an H200 goes to the CPU under the switch."""
    from engine.export.merge import merge_plan

    monkeypatch.setenv(t4.ENV_EMULATE_T4, "1")
    dev = detect_device()
    import engine.models.references as references

    monkeypatch.setattr(references, "architecture_ref", lambda ref, runs: "llama-3.1-8b")
    run = tmp_path / "r"
    run.mkdir()
    plan = merge_plan(run, tmp_path, dev, coexist.cuda_free_gib())  # 8B in fp16: ~15 GiB + 1 GiB margin > 0.9 x 10.7
    assert plan.device == "cpu"
    monkeypatch.delenv(t4.ENV_EMULATE_T4)
    plan = merge_plan(run, tmp_path, detect_device(), coexist.cuda_free_gib())
    assert plan.device == "auto"  # on the real card it merges on the GPU


def test_the_memory_fraction_never_exceeds_the_card():
    assert t4.memory_fraction(H200_BYTES) == pytest.approx(14.7 * 2**30 / H200_BYTES)
    assert t4.memory_fraction(12 * 2**30) == 1.0  # a card smaller than a T4: no cap above 1
    assert t4.memory_fraction(0) == 1.0


def test_without_cuda_the_switch_does_nothing(monkeypatch):
    monkeypatch.setenv(t4.ENV_EMULATE_T4, "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(device_mod.ENV_CPU_FP16_AMP, raising=False)
    assert detect_device().kind == "cpu"
