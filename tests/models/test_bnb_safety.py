"""The bitsandbytes CPU repack hazard (design.md §6) and its guard, engine/models/bnb_safety.py.

The property that matters: the LoRA gradients of a 4-bit model that was first used for generation (eval
mode, no grad: the playground, Trainer evaluation) equal those of a freshly loaded model. Without the guard
they do not on a CPU with AVX512-BF16 (the unguarded half is skipped elsewhere, where bitsandbytes never
repacks).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CPU, QUANT, allow_repack, has_avx512bf16, linear4bit_layers, load4, lora_grads, max_rel_diff, tiny_model_dir

from engine.config import GenerationSettings
from engine.inference.generate import generate_text
from engine.models.bnb_safety import count_repacked, disable_cpu_repack, prepare_for_training, undo_cpu_repack
from engine.models.loading import load_model

GREEDY = GenerationSettings(max_new_tokens=8, do_sample=False)


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    # Without biases, like Llama/Qwen: then the wrong gradients are silent (with biases, bitsandbytes'
    # packed kernel path fails loudly in backward instead, see test_with_biases_...).
    return tiny_model_dir(bias=False)


def test_loader_guards_every_4bit_layer(tiny_dir):
    layers = linear4bit_layers(load4(tiny_dir).model)
    assert len(layers) == 12 and not any(layer.support_avx512bf16_for_cpu for layer in layers)


def test_lora_gradients_after_generation_equal_a_fresh_model(tiny_dir, fresh_grads):
    used = load4(tiny_dir)  # guarded by load_model
    assert generate_text(used, "what color is the sky", GREEDY)
    assert count_repacked(used.model) == 0
    assert max_rel_diff(fresh_grads, lora_grads(used)) == 0.0


@pytest.mark.skipif(not has_avx512bf16(), reason="bitsandbytes repacks only on CPUs with AVX512-BF16")
def test_without_the_guard_generation_corrupts_lora_gradients(tiny_dir, fresh_grads):
    used = load4(tiny_dir)
    allow_repack(used.model)
    generate_text(used, "what color is the sky", GREEDY)
    assert count_repacked(used.model) == 12  # every 4-bit layer switched to the inference layout
    diff = max_rel_diff(fresh_grads, lora_grads(used))
    assert diff > 0.2, f"expected badly wrong gradients without the guard, got a relative difference of {diff:.3g}"


@pytest.mark.skipif(not has_avx512bf16(), reason="bitsandbytes repacks only on CPUs with AVX512-BF16")
def test_prepare_for_training_repairs_an_already_repacked_model(tiny_dir, fresh_grads):
    used = load4(tiny_dir)
    allow_repack(used.model)
    generate_text(used, "what color is the sky", GREEDY)
    assert prepare_for_training(used.model) == 12
    assert count_repacked(used.model) == 0 and undo_cpu_repack(used.model) == 0
    assert not any(layer.support_avx512bf16_for_cpu for layer in linear4bit_layers(used.model))
    # The inverse is best effort: the packed layout kept the block scales in bf16, hence a small residue.
    assert max_rel_diff(fresh_grads, lora_grads(used)) < 0.02
    # ... and it stays repaired after more inference.
    generate_text(used, "say hello", GREEDY)
    assert count_repacked(used.model) == 0


def test_helpers_are_harmless_on_models_without_4bit_layers(tiny_dir):
    plain = load_model(str(tiny_dir), runs_dir=tiny_dir.parent, device=CPU, allow_local_paths=True)
    assert disable_cpu_repack(plain.model) == 0
    assert undo_cpu_repack(plain.model) == 0
    assert prepare_for_training(plain.model) == 0


@pytest.mark.skipif(not has_avx512bf16(), reason="bitsandbytes repacks only on CPUs with AVX512-BF16")
def test_with_biases_the_unguarded_backward_fails_loudly_and_the_guard_fixes_it():
    biased = tiny_model_dir(bias=True)
    fresh = lora_grads(load4(biased))
    used = load4(biased)
    allow_repack(used.model)
    generate_text(used, "say hello", GREEDY)
    with pytest.raises(RuntimeError, match="in-place"):
        lora_grads(used)  # the packed kernel adds the bias in place on a tensor autograd tracks
    guarded = load4(biased)
    generate_text(guarded, "say hello", GREEDY)
    assert max_rel_diff(fresh, lora_grads(guarded)) == 0.0


def test_inference_only_callers_can_opt_in_to_the_fast_layout(tiny_dir):
    fast = load_model(
        str(tiny_dir), QUANT, runs_dir=tiny_dir.parent, device=CPU, allow_local_paths=True, allow_cpu_repack=True
    )
    assert fast.cpu_repack_allowed
    guarded = load4(tiny_dir)
    assert generate_text(fast, "what color is the sky", GREEDY) == generate_text(
        guarded, "what color is the sky", GREEDY
    )
    assert count_repacked(fast.model) == (12 if has_avx512bf16() else 0)
