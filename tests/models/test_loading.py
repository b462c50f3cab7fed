"""Tests for engine/models/loading.py (and engine/hardware/device.py): references, path safety, quantized loading, the cache.

CPU and offline. The tiny model here (`tiny_model_dir`, built by `build_tiny_model`) is shared with the
generation, export and bnb-safety tests (they import it from this module): a 2-layer CompactLLM with a
locally trained BPE tokenizer, briefly trained on a handful of chat exchanges so that greedy decoding
produces real words and stops on <|end|>.
"""

from __future__ import annotations

import gc
import shutil
import time
import weakref
from pathlib import Path

import pytest
import torch
from conftest import CPU, logits, make_adapter_run

from engine.config import QuantSettings
from engine.errors import ConfigError, ModelLoadError
from engine.hardware.device import DeviceInfo, detect_device, peak_memory_gib, resolve_dtype
from engine.models.cache import MODEL_CACHE, ModelCache
from engine.models.loading import LoadedModel, hub_error, load_model, load_tokenizer
from engine.models.references import builtin_model_dir


@pytest.fixture()
def runs(tmp_path, tiny_dir) -> Path:
    """A runs folder with the tiny model installed as the pretrained built-in 'compact-mini'."""
    runs = tmp_path / "runs"
    shutil.copytree(tiny_dir, builtin_model_dir("compact-mini", runs))
    return runs


# --- device policy ------------------------------------------------------------------------------------


def test_dtype_policy_per_device():
    t4 = DeviceInfo("cuda", "Tesla T4", 15.0, bf16=False, capability=(7, 5))
    a100 = DeviceInfo("cuda", "A100", 40.0, bf16=True, capability=(8, 0))
    assert resolve_dtype("auto", t4) == torch.float16
    assert resolve_dtype("auto", a100) == torch.bfloat16
    assert resolve_dtype("auto", CPU) == torch.float32
    assert resolve_dtype("fp32", t4) == torch.float32
    with pytest.raises(ConfigError, match="T4.*no bf16"):
        resolve_dtype("bf16", t4)
    with pytest.raises(ConfigError, match="fp16 has no fast CPU kernels"):
        resolve_dtype("fp16", CPU)
    assert resolve_dtype("bf16", CPU) == torch.bfloat16


def test_detect_device_and_peak_memory_on_this_machine():
    dev = detect_device()
    assert dev.kind in ("cpu", "cuda") and dev.total_gib > 0
    peak = peak_memory_gib(dev)
    assert peak is None or peak > 0


# --- references -----------------------------------------------------------------------------------------


def test_builtin_missing_tells_how_to_pretrain(tmp_path):
    with pytest.raises(ModelLoadError, match=r"has not been pretrained yet.*prepare-builtin compact-course"):
        load_model("builtin:compact-course", runs_dir=tmp_path, device=CPU)  # compact-mini is shipped pretrained
    with pytest.raises(ModelLoadError, match="Unknown built-in model"):
        load_model("builtin:no-such-preset", runs_dir=tmp_path, device=CPU)


def test_builtin_loads_from_the_runs_cache(runs, tiny_dir):
    loaded = load_model("builtin:compact-mini", runs_dir=runs, device=CPU)
    assert isinstance(loaded, LoadedModel)
    assert loaded.dtype == torch.float32 and loaded.quant.mode == "none"
    assert loaded.tokenizer.padding_side == "left" and loaded.tokenizer.chat_template
    assert loaded.context_length == 64 and loaded.footprint_gib > 0
    assert "built-in compact-mini" in loaded.where
    assert loaded.config_path == builtin_model_dir("compact-mini", runs) / "config.json"


@pytest.mark.parametrize(
    "ref",
    [
        "run:../x",
        "run:..",
        "run:a/b",
        "run:/etc",
        "run:.hidden",
        "builtin:../../etc",
        "builtin:a/b",
        "../runs",
        "/etc",
        "a\x00b",
        "x" * 5000,
        "~",
    ],
)
def test_refs_that_name_server_paths_are_rejected(runs, ref):
    with pytest.raises(ModelLoadError):
        load_model(ref, runs_dir=runs, device=CPU)


def test_local_folders_need_permission_unless_inside_the_runs_dir(runs, tiny_dir, monkeypatch):
    with pytest.raises(ModelLoadError, match="path on the server"):
        load_model(str(tiny_dir), runs_dir=runs, device=CPU)
    # A relative folder that happens to look like an "owner/name" Hub id must not slip through either.
    monkeypatch.chdir(tiny_dir.parent.parent)
    with pytest.raises(ModelLoadError, match="path on the server"):
        load_model(f"{tiny_dir.parent.name}/model", runs_dir=runs, device=CPU)
    loaded = load_model(str(tiny_dir), runs_dir=runs, device=CPU, allow_local_paths=True)
    assert torch.allclose(logits(loaded), logits(load_model("builtin:compact-mini", runs_dir=runs, device=CPU)))
    inside = builtin_model_dir("compact-mini", runs)
    assert load_model(str(inside), runs_dir=runs, device=CPU).ref == str(inside)
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(runs), runs_dir=runs, device=CPU)


def test_run_with_full_model(runs, tiny_dir):
    shutil.copytree(tiny_dir, runs / "full-1" / "model")
    loaded = load_model("run:full-1", runs_dir=runs, device=CPU)
    assert "run full-1" in loaded.where and loaded.adapter is None
    (runs / "unfinished").mkdir()
    with pytest.raises(ModelLoadError, match="no final model yet"):
        load_model("run:unfinished", runs_dir=runs, device=CPU)
    with pytest.raises(ModelLoadError, match="no run named"):
        load_model("run:nothing-here", runs_dir=runs, device=CPU)


def test_run_with_adapter_loads_base_plus_unmerged_adapter(runs):
    from peft import PeftModel

    reference = make_adapter_run(runs)
    loaded = load_model("run:lora-1", runs_dir=runs, device=CPU)
    assert isinstance(loaded.model, PeftModel)
    assert "LoRA adapter on built-in compact-mini" in loaded.where
    assert loaded.adapter == str(runs / "lora-1" / "adapter")
    reference.tokenizer = loaded.tokenizer
    assert torch.allclose(logits(loaded), logits(reference), atol=1e-5)
    # The adapter changes the output: the base alone gives different logits.
    assert not torch.allclose(
        logits(loaded), logits(load_model("builtin:compact-mini", runs_dir=runs, device=CPU)), atol=1e-3
    )

    # Without config.yaml, the base comes from adapter_config.json (a folder written by the trainer).
    (runs / "lora-1" / "config.yaml").unlink()
    again = load_model("run:lora-1", runs_dir=runs, device=CPU)
    assert torch.allclose(logits(again), logits(loaded), atol=1e-6)

    # adapter= applies a run's adapter on top of an explicitly named base.
    explicit = load_model("builtin:compact-mini", runs_dir=runs, device=CPU, adapter="run:lora-1")
    assert torch.allclose(logits(explicit), logits(loaded), atol=1e-6)
    with pytest.raises(ModelLoadError):
        load_model("builtin:compact-mini", runs_dir=runs, device=CPU, adapter="/etc")


def test_qlora_run_loads_its_base_in_4bit(runs):
    import bitsandbytes as bnb

    make_adapter_run(runs, name="qlora-1", method="qlora")
    loaded = load_model("run:qlora-1", runs_dir=runs, device=CPU)
    assert loaded.quant.mode == "4bit"
    layers = [m for m in loaded.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers and all(not m.support_avx512bf16_for_cpu for m in layers)


@pytest.mark.parametrize("mode", ["4bit", "8bit"])
def test_quantized_load_on_cpu(runs, mode):
    import bitsandbytes as bnb

    full = load_model("builtin:compact-mini", runs_dir=runs, device=CPU)
    quant = QuantSettings(mode=mode, quant_type="nf4", double_quant=True)
    loaded = load_model("builtin:compact-mini", quant, runs_dir=runs, device=CPU)
    cls = bnb.nn.Linear4bit if mode == "4bit" else bnb.nn.Linear8bitLt
    layers = [m for m in loaded.model.modules() if isinstance(m, cls)]
    assert len(layers) == 2 * 6  # q, k, v, o, up, down per block; the tied lm_head stays unquantized
    assert loaded.footprint_gib < full.footprint_gib
    if mode == "4bit":
        assert all(not m.support_avx512bf16_for_cpu for m in layers)  # the repack guard (bnb_safety)
    # Quantized weights are close to the originals: the next-token distribution barely moves.
    p, q = logits(full).softmax(-1), logits(loaded).softmax(-1)
    assert (p - q).abs().sum(-1).max() < 0.5
    assert loaded.quant.mode == mode and f"{mode}" in loaded.where.replace("4-bit", "4bit")


def test_unknown_hub_id_offline_is_a_clear_error(runs, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read once at import time
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError, match="not found or no internet"):
        load_model("nobody-here/no-such-model-xyz", runs_dir=runs, device=CPU)
    assert time.perf_counter() - t0 < 10  # no network retries
    with pytest.raises(ModelLoadError, match="not a model reference"):
        load_model("bad id with spaces", runs_dir=runs, device=CPU)


def test_remote_code_error_explains_the_risk():
    err = hub_error(
        ValueError("... requires you to execute code ... set the option `trust_remote_code=True`"), "model", "x/y"
    )
    assert "Trust remote code" in str(err) and "only if you trust" in str(err)


def test_load_tokenizer(runs):
    make_adapter_run(runs)
    for ref in ("builtin:compact-mini", "run:lora-1"):
        tok = load_tokenizer(ref, runs_dir=runs)
        assert tok.padding_side == "left" and tok.pad_token is not None and tok.chat_template


# --- cache ----------------------------------------------------------------------------------------------


def test_cache_returns_the_same_object_and_unload_frees_it(runs):
    cache = ModelCache(max_models=1)
    a = cache.get_or_load("builtin:compact-mini", runs_dir=runs, device=CPU)
    b = cache.get_or_load("builtin:compact-mini", runs_dir=runs, device=CPU)
    assert a is b and len(cache) == 1
    assert [e["ref"] for e in cache.loaded()] == ["builtin:compact-mini"]
    # A different request (4-bit) is another entry; with max_models=1 it evicts the first.
    c = cache.get_or_load("builtin:compact-mini", QuantSettings(mode="4bit"), runs_dir=runs, device=CPU)
    assert c is not a and len(cache) == 1
    # Permission to name local paths is part of the identity of a request.
    assert cache.key("x", allow_local_paths=True) != cache.key("x", allow_local_paths=False)

    model_ref = weakref.ref(c.model)
    del a, b, c
    assert cache.unload("builtin:compact-mini") == 1 and len(cache) == 0 and cache.loaded() == []
    gc.collect()
    assert model_ref() is None  # nothing else kept the model alive
    assert cache.unload("builtin:compact-mini") == 0


def test_the_shared_cache_returns_one_model_and_load_model_always_loads(runs):
    try:
        first = MODEL_CACHE.get_or_load("builtin:compact-mini", runs_dir=runs, device=CPU)
        assert MODEL_CACHE.get_or_load("builtin:compact-mini", runs_dir=runs, device=CPU) is first
        assert load_model("builtin:compact-mini", runs_dir=runs, device=CPU) is not first
    finally:
        assert MODEL_CACHE.unload_all() >= 1
    assert len(MODEL_CACHE) == 0
