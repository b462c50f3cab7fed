"""The named physical components of the estimate, hand-computed on a tiny Llama-style model: QLoRA's fixed costs
(dequantized weight, lm_head copy, prepare_model_for_kbit_training upcasts, LoRA input copies), the foreach AdamW
step temporary, paged state in what nvidia-smi shows; and encoders (estimated) vs encoder-decoders (refused)."""

from __future__ import annotations

import json

import pytest

from engine.config import MemoryQuery
from engine.errors import ConfigError, ModelLoadError
from engine.estimator.memory import CAL, GIB, detail_rows, estimate

TINY = "manual:L=2,h=64,a=4,kv=4,i=128,v=1000,tied=0"
H, I, V, L = 64, 128, 1000, 2  # noqa: E741
LAYER_LINEAR = 4 * H * H + 3 * H * I
PARAMS = L * (LAYER_LINEAR + 2 * H) + 2 * V * H + H
NORMS = L * 2 * H + H


def q(**kw) -> MemoryQuery:
    base = dict(model=TINY, task="qlora", training_precision="amp-bf16", lora_r=16, lora_targets="q,v", lora_dropout=0.05,
                batch=1, seq_len=32, grad_ckpt=False, optimizer="adamw")
    base.update(kw)
    return MemoryQuery(**base)


def detail(est, prefix: str) -> float:
    found = [v for k, v in est.details_gib.items() if k.startswith(prefix)]
    assert len(found) == 1, (prefix, list(est.details_gib))
    return found[0] * GIB


def test_qlora_fixed_costs_each_have_their_line():
    e = estimate(q())
    assert detail(e, "dequantized 4-bit weight") == 64 * 128 * 2  # the largest linear (gate/up/down) in bf16
    assert detail(e, "16-bit copy of the fp32 lm_head") == V * H * 2  # autocast's copy kept for backward
    assert detail(e, "fp32 upcast") == (PARAMS - L * LAYER_LINEAR) * 2  # 16 -> 32 bit for everything not quantized
    # q and v adapters with dropout under autocast, per layer and token: bf16 input copy + 1-byte mask + r bf16 values
    per_layer_token = 2 * (2 * H + H + 2 * 16)
    assert detail(e, "LoRA path") == per_layer_token * 32 * L
    assert detail(estimate(q(grad_ckpt=True)), "LoRA path") == per_layer_token * 32  # one recomputed layer
    rows = detail_rows(e)
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True) and len(rows) == len(e.details_gib)


def test_autocast_keeps_16_bit_copies_of_the_fp32_adapters():
    n = L * 2 * 16 * (H + H)  # q and v, r = 16
    assert detail(estimate(q()), "16-bit copies of the fp32 LoRA adapters") == 2 * n
    assert detail(estimate(q(grad_ckpt=True)), "16-bit copies of the fp32 LoRA adapters") == 2 * n / L  # one recomputed layer
    assert not any(k.startswith("16-bit copies of the fp32 LoRA") for k in estimate(q(training_precision="pure-bf16")).details_gib)


def test_no_autocast_no_lm_head_copy_and_pure_bf16_no_upcast():
    assert not any(k.startswith("16-bit copy") for k in estimate(q(training_precision="fp32")).details_gib)
    assert not any(k.startswith("fp32 upcast") for k in estimate(q(training_precision="pure-bf16")).details_gib)


def test_foreach_adamw_step_temporary_is_the_larger_parameter_group():
    full = dict(task="full", weight_precision="auto", batch=1, seq_len=1)
    fused = estimate(q(**full))
    foreach = estimate(q(**full, optimizer="adamw-foreach"))
    assert foreach.phase == "optimizer step"
    step_tmp = 4 * (PARAMS - NORMS)  # fp32 sqrt(exp_avg_sq) of the "decay" group: every weight matrix and embedding
    assert detail(foreach, "optimizer step temporary") == step_tmp
    assert foreach.breakdown_gib["temporary buffers"] * GIB == step_tmp
    assert fused.allocated_gib < foreach.allocated_gib


def test_paged_state_counts_in_nvidia_smi_not_in_allocated():
    e = estimate(q(optimizer="paged-adamw-32bit"))
    n = L * 2 * 16 * (H + H)
    assert e.spillable_gib * GIB == 8 * n
    frag = e.breakdown_gib["fragmentation"]
    assert e.total_gib == pytest.approx(e.allocated_gib + frag + CAL["cuda_context_gib"] + e.spillable_gib)


def write_config(tmp_path, name: str, data: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_an_encoder_is_estimated_with_its_own_terms_and_cannot_generate(tmp_path):
    bert = write_config(tmp_path, "bert", {"model_type": "bert", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
                                           "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64})
    e = estimate(MemoryQuery(model=bert, task="full", training_precision="fp32", batch=2, seq_len=16))
    assert e.params > 0 and e.breakdown_gib["activations"] > 0 and any("encoder (BERT-like)" in n for n in e.notes)
    with pytest.raises(ConfigError) as info:
        estimate(MemoryQuery(model=bert, task="inference"))
    assert info.value.field == "task"


def test_an_encoder_decoder_is_refused_by_name(tmp_path):
    t5 = write_config(tmp_path, "t5", {"model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
                                       "num_heads": 4})
    with pytest.raises(ModelLoadError, match="t5 is an encoder-decoder"):
        estimate(MemoryQuery(model=t5, task="full"))
