"""What DPO, ORPO and GRPO add to the estimate, line by line, checked against what the real objects hold on this CPU:
the frozen reference DPO keeps (a copy of every weight, or of the adapter), the pairs' doubled batch, and GRPO's
generated answers (the KV cache generate() leaves behind for a whole generation batch)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.config import MemoryQuery, TrainConfig
from engine.estimator.handoff import estimate_train, query_from_train
from engine.estimator.memory import GIB, estimate
from engine.estimator.objectives import breakdown_rows, estimate_objective, objective_line

TINY = "manual:L=2,h=64,a=4,kv=4,i=128,v=1000,tied=0"


def q(**kw) -> MemoryQuery:
    base = dict(model=TINY, task="full", weight_precision="fp32", training_precision="fp32", batch=4, seq_len=32, optimizer="adamw",
                lora_targets="q,v", lora_r=8)
    return MemoryQuery(**{**base, **kw})


def test_dpo_lines_reference_and_pairs():
    sft = estimate(q())
    full = estimate_objective(q(), "dpo")
    assert full.breakdown_gib["reference model"] == pytest.approx(sft.breakdown_gib["weights"])  # a frozen copy of every weight
    assert full.allocated_gib == pytest.approx(estimate(q(batch=8)).allocated_gib + sft.breakdown_gib["weights"])  # chosen + rejected
    lora = estimate_objective(q(task="lora", weight_precision="bf16", training_precision="amp-bf16"), "dpo")
    assert 0 < lora.breakdown_gib["reference model"] == pytest.approx(lora.breakdown_gib["trainable weights"])  # only the adapter copy
    orpo = estimate_objective(q(), "orpo")
    assert orpo.breakdown_gib["reference model"] == 0 and orpo.allocated_gib == pytest.approx(estimate(q(batch=8)).allocated_gib)
    names = [r[0] for r in breakdown_rows(full)]
    assert names[-1] == "reference model" and "reference model" not in [r[0] for r in breakdown_rows(orpo)]
    assert any(r[0] == "modelo de referência" for r in breakdown_rows(full, "pt-BR"))
    assert objective_line(full).startswith("reference model 0.") and objective_line(orpo) == ""


def test_kto_lines_reference_and_one_answer_per_row():
    sft = estimate(q())
    full = estimate_objective(q(), "kto")
    assert full.breakdown_gib["reference model"] == pytest.approx(sft.breakdown_gib["weights"])  # DPO's reference
    assert full.allocated_gib == pytest.approx(sft.allocated_gib + sft.breakdown_gib["weights"])  # the KL answers run without gradients
    lora = estimate_objective(q(task="lora", weight_precision="bf16", training_precision="amp-bf16"), "kto")
    assert 0 < lora.breakdown_gib["reference model"] == pytest.approx(lora.breakdown_gib["trainable weights"])
    assert any("KTO" in str(n) for n in full.notes)
    cfg = TrainConfig(method="kto", tuning="full", base_model="builtin:compact-mini", micro_batch_size=4, max_seq_len=64)
    assert estimate_train(cfg, "fp32", on_cpu=True).breakdown_gib["reference model"] > 0


def test_grpo_line_counts_a_generation_batch_of_answers():
    e = estimate_objective(q(batch=8, grad_accum=2), "grpo", num_generations=4, completion_len=16)
    kv = 2 * 2 * 64 * 4 * 16 * (32 + 16)  # K and V x layers x kv dim x fp32 bytes x 16 answers x prompt + answer tokens
    assert e.breakdown_gib["generations"] * GIB >= kv
    detail = next(v for k, v in e.details_gib.items() if k.startswith("KV cache of 16 answers"))
    assert detail * GIB == pytest.approx(kv, rel=0.05)
    assert "generated answers" in [r[0] for r in breakdown_rows(e)]
    # many answers at once (a micro batch of 1 accumulated 64 times) of long answers: the generation phase is the peak
    big = estimate_objective(q(batch=1, grad_accum=64, seq_len=256, grad_ckpt=True), "grpo", num_generations=8, completion_len=1024)
    assert big.phase == "generating answers" and big.breakdown_gib["activations"] == 0


def test_estimate_train_dispatches_by_method():
    base = dict(base_model="builtin:compact-mini", micro_batch_size=16, max_seq_len=72)
    sft = estimate_train(TrainConfig(method="full", **base), "fp32", on_cpu=True)
    dpo = estimate_train(TrainConfig(method="dpo", tuning="full", **base), "fp32", on_cpu=True)
    grpo = estimate_train(TrainConfig(method="grpo", tuning="full", num_generations=8, **base), "fp32", on_cpu=True)
    assert dpo.breakdown_gib["reference model"] > 0 and dpo.allocated_gib > sft.allocated_gib
    assert grpo.breakdown_gib["generations"] > 0 and "reference model" not in grpo.breakdown_gib
    assert query_from_train(TrainConfig(method="grpo", tuning="qlora", **base), "bf16").task == "qlora"


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_lines_match_what_the_objects_hold_on_this_cpu(tmp_path):
    """Measured: the reference a full DPO run copies, the adapter copy of a LoRA run, and the KV cache generate() keeps
    for a generation batch of the built-in model, against the estimate's lines."""
    import copy

    from peft import LoraConfig, get_peft_model

    from engine.models.compact import CompactForCausalLM, load_compact_preset

    config = load_compact_preset("compact-mini")
    model = CompactForCausalLM(config).eval()
    path = tmp_path / "config.json"
    config.to_json_file(str(path))
    cfg = TrainConfig(method="dpo", tuning="full", base_model="builtin:compact-mini", micro_batch_size=4, max_seq_len=32)
    est = estimate_train(cfg, "fp32", str(path), on_cpu=True)
    reference = copy.deepcopy(model)  # what engine/training/preference.py keeps for a full DPO run
    measured = _bytes(reference.parameters())
    assert est.breakdown_gib["reference model"] * GIB == pytest.approx(measured, rel=0.02)

    peft = get_peft_model(copy.deepcopy(model), LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    lora_cfg = dataclasses.replace(cfg, tuning="lora")
    lora_cfg.lora.r = 8
    est_lora = estimate_train(lora_cfg, "fp32", str(path), on_cpu=True)
    adapter = _bytes(p for n, p in peft.named_parameters() if "lora_" in n)  # trl's frozen "ref" adapter is a copy of these
    assert est_lora.breakdown_gib["reference model"] * GIB == pytest.approx(adapter, rel=0.35)

    answers, prompt, new = 8, 24, 12
    grpo = TrainConfig(method="grpo", tuning="full", base_model="builtin:compact-mini", micro_batch_size=answers, max_seq_len=prompt,
                       num_generations=4, max_completion_length=new)
    est_grpo = estimate_train(grpo, "fp32", str(path), on_cpu=True)
    ids = torch.randint(5, config.vocab_size, (answers, prompt))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    cache = out.past_key_values
    kv = sum(_bytes([layer.keys, layer.values]) for layer in cache.layers)
    line = next(v for k, v in est_grpo.details_gib.items() if k.startswith(f"KV cache of {answers} answers")) * GIB
    assert line == pytest.approx(kv, rel=0.1)  # the last token is sampled but never written to the cache: within one token
    assert est_grpo.breakdown_gib["generations"] * GIB >= kv


def test_the_forms_prediction_names_what_the_method_adds():
    from engine.views.finetune_form import memory_prediction

    base = dict(base_model="builtin:compact-mini", micro_batch_size=8, max_seq_len=72)
    text, _ = memory_prediction(TrainConfig(method="dpo", tuning="full", **base), lang="pt-BR")
    assert "modelo de referência" in text
    text, _ = memory_prediction(TrainConfig(method="grpo", tuning="lora", num_generations=8, **base))
    assert "generated answers" in text and "reference model" not in text
