"""Tests for CPU int8 dynamic quantization (engine/models/cpu_quant.py via load_model) and placement reporting
(engine/hardware/placement.py, LoadedModel.placement, device_map="auto" passthrough). CPU and offline, tiny model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import CPU, logits, make_adapter_run, tiny_model_dir

import engine.models.loading as loaders
from engine.config import GenerationSettings, QuantSettings
from engine.errors import ConfigError, ModelLoadError
from engine.hardware.device import DeviceInfo
from engine.hardware.placement import describe_placement, summarize_device_map
from engine.inference.generate import generate_text
from engine.models.cache import ModelCache
from engine.models.cpu_quant import footprint_bytes, is_int8_dynamic
from engine.models.loading import load_model
from engine.models.references import builtin_model_dir, resolve_offload_folder

INT8 = QuantSettings(mode="int8-dynamic")
T4 = DeviceInfo("cuda", "Tesla T4", 15.0, bf16=False, capability=(7, 5))
GREEDY = GenerationSettings(max_new_tokens=12, do_sample=False, repetition_penalty=1.0)


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    return tiny_model_dir()


@pytest.fixture(scope="module")
def fp32_and_int8(tiny_dir):
    kwargs = dict(runs_dir=tiny_dir.parent, device=CPU, allow_local_paths=True)
    return load_model(str(tiny_dir), **kwargs), load_model(str(tiny_dir), INT8, **kwargs)


def test_int8_dynamic_loads_smaller_and_generates_like_fp32(fp32_and_int8):
    fp32, int8 = fp32_and_int8
    linears = [m for m in int8.model.modules() if is_int8_dynamic(m)]
    # every Linear of the 2 blocks (q, k, v, o, up, down) and the tied head
    assert len(linears) == 2 * 6 + 1 and not any(type(m) is torch.nn.Linear for m in int8.model.modules())
    assert int8.quant.mode == "int8-dynamic" and "int8 dynamic" in int8.where
    assert int8.footprint_gib < 0.6 * fp32.footprint_gib
    # get_memory_footprint misses the packed int8 weights; ours counts them (and agrees on plain models)
    assert footprint_bytes(fp32.model) == fp32.model.get_memory_footprint()
    assert footprint_bytes(int8.model) > int8.model.get_memory_footprint()

    # The int8 head is an untied copy of the embedding: logits move a little, greedy text stays the same here.
    assert int8.model.model.embed_tokens.weight.dtype == torch.float32
    reference = logits(fp32)
    diff = (logits(int8) - reference).abs().max().item()
    assert 0 < diff < 0.05 * reference.abs().max().item()  # a few % of the logit scale
    text = generate_text(fp32, "what color is the sky", GREEDY)
    assert text and generate_text(int8, "what color is the sky", GREEDY) == text


def test_int8_dynamic_is_cpu_only_with_a_clear_message(tiny_dir, monkeypatch):
    with pytest.raises(ConfigError, match="8bit or 4bit on a GPU.*Tesla T4.*CPU only"):
        load_model(str(tiny_dir), INT8, device=T4, runs_dir=tiny_dir.parent, allow_local_paths=True)

    def no_weights(*args, **kwargs):
        raise AssertionError("the device check must come before loading any weights")

    # the detected device (no device= passed) is checked the same way, before from_pretrained runs
    monkeypatch.setattr(loaders, "detect_device", lambda: T4)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_weights)
    with pytest.raises(ConfigError, match="int8-dynamic"):
        load_model(str(tiny_dir), INT8, runs_dir=tiny_dir.parent, allow_local_paths=True)


def test_int8_dynamic_needs_fp32():
    with pytest.raises(ConfigError, match="quant.compute_dtype.*fp32"):
        QuantSettings(mode="int8-dynamic", compute_dtype="bf16")
    assert QuantSettings(mode="int8-dynamic", compute_dtype="fp32").mode == "int8-dynamic"


def test_int8_dynamic_merges_an_adapter_first(tmp_path, tiny_dir):
    runs = tmp_path / "runs"
    shutil.copytree(tiny_dir, builtin_model_dir("compact-mini", runs))
    make_adapter_run(runs, name="lora-8")
    adapter_fp32 = load_model("run:lora-8", runs_dir=runs, device=CPU)
    int8 = load_model("run:lora-8", INT8, runs_dir=runs, device=CPU)
    assert "adapter merged" in int8.where and not hasattr(int8.model, "peft_config")
    base = load_model("builtin:compact-mini", runs_dir=runs, device=CPU)
    # closer to the adapter model than to the base: the adapter is in the quantized weights
    to_adapter = (logits(int8) - logits(adapter_fp32)).abs().max().item()
    assert to_adapter < 0.05 * logits(adapter_fp32).abs().max().item()
    assert to_adapter < (logits(int8) - logits(base)).abs().max().item()


def test_int8_dynamic_is_its_own_cache_entry():
    assert ModelCache.key("builtin:x", INT8) != ModelCache.key("builtin:x", QuantSettings(mode="none"))


# --- placement ------------------------------------------------------------------------------------------


def test_placement_names_devices_and_formats(fp32_and_int8):
    fp32, int8 = fp32_and_int8
    assert fp32.placement() == {
        "model.embed_tokens": "cpu · fp32",
        "model.embed_positions": "cpu · fp32",
        "model.layers.0-1": "cpu · fp32",
        "model.norm": "cpu · fp32",
        "lm_head": "cpu · fp32 (tied to model.embed_tokens)",
    }
    placed = int8.placement()
    assert placed["model.layers.0-1"] == "cpu · fp32 + int8 dynamic"  # LayerNorms fp32, Linears int8
    assert placed["lm_head"] == "cpu · int8 dynamic"


def test_placement_follows_accelerates_device_map(fp32_and_int8):
    model = fp32_and_int8[0].model
    # What accelerate records after device_map="auto" split a model over a GPU, the RAM and the disk.
    device_map = {"model.embed_tokens": 0, "model.embed_positions": 0, "model.layers.0": 0,
                  "model.layers.1": "cpu", "model.norm": "disk", "lm_head": "disk"}
    model.hf_device_map = device_map
    try:
        placed = describe_placement(model, is_int8_dynamic=is_int8_dynamic)
    finally:
        del model.hf_device_map
    assert placed["model.layers.0"] == "cuda:0 · fp32"
    assert placed["model.layers.1"] == "cpu (offloaded) · fp32"
    assert placed["lm_head"].startswith("disk (offloaded) · fp32")
    assert summarize_device_map(device_map) == (
        "split: 3 module groups on cuda:0, 1 module group on cpu (offloaded), 2 module groups on disk (offloaded)"
    )
    assert summarize_device_map({"": 0}) == "all on cuda:0" and summarize_device_map(None) == ""


def test_device_map_auto_is_a_no_op_on_cpu_and_offloads_only_under_runs(tiny_dir, tmp_path):
    loaded = load_model(str(tiny_dir), device=CPU, runs_dir=tiny_dir.parent, allow_local_paths=True, device_map="auto")
    assert getattr(loaded.model, "hf_device_map", None) is None and loaded.where.endswith("on cpu")
    runs = tmp_path / "runs"
    assert resolve_offload_folder(None, runs, False) == runs / "_offload"
    with pytest.raises(ModelLoadError, match="outside the runs directory"):
        resolve_offload_folder(tmp_path / "elsewhere", runs, False)
    assert resolve_offload_folder(tmp_path / "elsewhere", runs, True) == tmp_path / "elsewhere"
