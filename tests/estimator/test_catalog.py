"""Preset data: every catalog model's exact count, hardware tiers, and recipes that fit their tier."""

from __future__ import annotations

import pytest

from engine.config import MemoryQuery
from engine.estimator import memory
from engine.estimator.catalog import catalog, catalog_lookup, hardware_tiers, recipes
from engine.estimator.model_config import resolve

CATALOG = catalog()


def test_catalog_is_big_enough_and_sourced():
    assert len(CATALOG) >= 25
    names = [e.name for e in CATALOG]
    assert len(set(names)) == len(names)
    sizes = sorted(e.params for e in CATALOG)
    assert sizes[0] < 200e6 and sizes[-1] > 65e9  # ~100M to 70B
    for e in CATALOG:
        assert e.source.startswith("https://huggingface.co/") and e.source.endswith("config.json"), e.name
        assert e.config.get("model_type"), e.name


@pytest.mark.parametrize("entry", CATALOG, ids=[e.name for e in CATALOG])
def test_catalog_count_matches_published_size(entry):
    """Meta-device count of the catalog config vs the published parameter count (exact, or within 2% when rounded)."""
    arch = resolve(entry.name)
    if entry.params_exact:
        assert arch.params_total == int(entry.params)
    else:
        assert arch.params_total == pytest.approx(entry.params, rel=0.02)


@pytest.mark.parametrize("ref,name", [("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
                                      ("meta-llama/Llama-2-13b-chat-hf", "llama-2-13b"), ("MICROSOFT/PHI-2", "phi-2"),
                                      ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b")])
def test_hub_ids_resolve_offline_through_the_catalog(ref, name):
    assert catalog_lookup(ref).name == name


def test_hardware_tiers():
    tiers = hardware_tiers()
    names = {t.name for t in tiers}
    for needed in ("gpu-4gb", "gpu-6gb", "gpu-8gb", "gpu-12gb", "t4-16gb", "gpu-16gb", "gpu-24gb", "a100-40gb", "gpu-48gb", "gpu-80gb", "cpu-16gb"):
        assert needed in names
    t4 = next(t for t in tiers if t.name == "t4-16gb")
    assert not t4.bf16 and t4.usable_gib < 15.1
    for t in tiers:
        assert 0 < t.usable_gib <= t.total_gib and t.cuda_context_gib >= 0 and t.source


_QUANT = {"4bit": "nf4"}


@pytest.mark.parametrize("recipe", recipes(), ids=[r.name for r in recipes()])
def test_recipes_fit_their_tier(recipe):
    s = recipe.settings
    method = s["method"]
    precision = s.get("precision", "bf16")
    if precision == "auto":  # CPU recipes: decided by the CPU that trains (bf16 or fp32), estimated as fp32 (recipes.py)
        precision = "fp32"
    if method == "qlora":
        wp = s.get("quant.quant_type", "nf4")
    elif method == "full":
        wp = "bf16" if precision == "bf16" else "fp32"
    else:
        wp = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}[precision]
    tp = {"fp32": "fp32", "fp16": "amp-fp16", "bf16": "amp-bf16"}[precision]
    query = MemoryQuery(
        model=_recipe_model(recipe), task=method, weight_precision=wp, double_quant=s.get("quant.double_quant", True), training_precision=tp,
        optimizer=s.get("optimizer", "adamw"), lora_r=s.get("lora.r", 16), lora_targets=s.get("lora.targets", "all-linear"),
        batch=s["micro_batch_size"], seq_len=s["max_seq_len"], grad_ckpt=s.get("grad_checkpointing", False), grad_accum=s.get("grad_accum", 1),
    )
    assert memory.estimate(query).tiers[recipe.tier] == "fits", recipe.name


def _recipe_model(recipe) -> str:
    import yaml

    from engine.estimator.catalog import PRESETS_DIR

    rows = yaml.safe_load((PRESETS_DIR / "recipes.yaml").read_text())["recipes"]
    return next(r["model"] for r in rows if r["name"] == recipe.name)
