"""Issue 28: the verdict rests on what must stay resident on the GPU (paged optimizer state pages out), checked on the
QLoRA paper's published results and their neighbours that did not fit; and the per-GPU memory under DDP and FSDP.

The QLoRA paper (Dettmers et al. 2023, arXiv:2305.14314; its qlora.py and scripts/finetune_guanaco_*.sh) trains
Guanaco 65B on one 48 GB GPU and 33B on one 24 GB GPU with: NF4 + double quantization, bf16 compute, LoRA r=64
(alpha 16) on every linear layer of the blocks, paged AdamW (qlora.py's default optim paged_adamw_32bit), gradient
checkpointing, batch 1 per device (gradient accumulation 16), sequences of at most 16 + 512 tokens (source_max_len
16, target_max_len 512 on OASST1; 512 used here), LoRA dropout 0.05 for 33B/65B. The models are LLaMA-1 33B
(huggyllama/llama-30b: 60 layers, hidden 6656) and 65B (huggyllama/llama-65b: 80 layers, hidden 8192). The
estimate is for this project's stack (transformers 5 / peft / bitsandbytes 0.50: prepare_model_for_kbit_training
keeps embeddings and lm_head in fp32, where qlora.py casts them back to bf16: ~0.8 GiB more for 33B, ~1 GiB for
65B, on the safe side)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.config import MemoryQuery
from engine.estimator import memory
from engine.estimator.catalog import tier_by_name

LLAMA_65B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 8192, "intermediate_size": 22016,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 64, "max_position_embeddings": 2048,
             "rms_norm_eps": 1e-05, "tie_word_embeddings": False}
LLAMA_33B = {**LLAMA_65B, "hidden_size": 6656, "intermediate_size": 17920, "num_hidden_layers": 60, "num_attention_heads": 52,
             "num_key_value_heads": 52, "rms_norm_eps": 1e-06}


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    """(query of 65B, query of 33B) with the paper's settings."""
    d = tmp_path_factory.mktemp("qlora_paper")
    out = []
    for name, cfg in (("llama-65b", LLAMA_65B), ("llama-30b", LLAMA_33B)):
        path = d / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(cfg), encoding="utf-8")
        out.append(MemoryQuery(model=str(path), task="qlora", weight_precision="nf4", double_quant=True, training_precision="amp-bf16",
                               optimizer="paged-adamw-32bit", lora_r=64, lora_targets="all-linear", lora_dropout=0.05, batch=1, seq_len=512,
                               grad_ckpt=True))
    return tuple(out)


def _upper(q: MemoryQuery, tier_name: str) -> float:
    """The high end of the band of what must stay resident on the card (the verdict's basis)."""
    tier = tier_by_name(tier_name)
    need, _paged = memory.need_gib(q, tier)
    band = memory.query_band(q)
    return tier.cuda_context_gib + (need - tier.cuda_context_gib) * band.high


@pytest.mark.parametrize(("which", "card", "params_b"), [(0, "gpu-48gb", 65.3), (1, "gpu-24gb", 32.5)], ids=["65B-on-48GB", "33B-on-24GB"])
def test_the_qlora_paper_results_fit_with_a_small_margin(paper, which, card, params_b):
    q = paper[which]
    est = memory.estimate(q)
    assert est.params / 1e9 == pytest.approx(params_b, abs=0.1)
    assert est.tiers[card] == "fits"
    usable = tier_by_name(card).usable_gib
    margin = 1 - _upper(q, card) / usable
    assert 0.0 <= margin < 0.2, margin  # fits, and not by a mile: these runs were known to be close to the card's size
    # the paged AdamW state is named apart; on the 24 GB card it does not all fit beside the rest: part of it pages out,
    # which costs time per optimizer step, not the run
    assert est.pageable_gib > 0 and est.resident_gib < usable
    out = est.paged_out_gib[card]
    assert 0 <= out <= est.pageable_gib
    if card == "gpu-24gb":
        assert out > 0 and memory.paging_seconds(out) > 0


@pytest.mark.parametrize(("which", "changes", "card"), [
    (0, {}, "gpu-24gb"),  # 65B 4-bit on a 24 GB card: the weights alone do not fit
    (1, {}, "gpu-16gb"),  # 33B on 16 GB
    (0, {"task": "lora", "weight_precision": "bf16"}, "gpu-48gb"),  # 16-bit LoRA of 65B on the 48 GB card (130 GB of weights)
    (1, {"task": "lora", "weight_precision": "bf16"}, "gpu-24gb"),  # 16-bit LoRA of 33B on the 24 GB card
    (1, {"task": "full", "weight_precision": "bf16", "optimizer": "paged-adamw-8bit"}, "gpu-80gb"),  # full fine-tune of 33B on 80 GB
], ids=["65B-on-24GB", "33B-on-16GB", "65B-16bit-LoRA-on-48GB", "33B-16bit-LoRA-on-24GB", "33B-full-on-80GB"])
def test_their_neighbours_that_did_not_fit_do_not(paper, which, changes, card):
    q = dataclasses.replace(paper[which], **changes)
    assert memory.estimate(q).tiers[card] == "no"


def test_paged_state_is_named_never_decides_and_its_largest_tensor_stays_resident(paper):
    q = paper[1]
    est = memory.estimate(q)
    plain = memory.estimate(dataclasses.replace(q, optimizer="adamw"))  # the same state, resident
    assert est.pageable_gib == pytest.approx(plain.breakdown_gib["optimizer state"])
    assert plain.pageable_gib == 0 and plain.tiers["gpu-24gb"] != "fits"  # 3.6 GiB more that cannot page out
    assert est.resident_gib == pytest.approx(est.total_gib - est.pageable_gib)
    rows = memory.residency_rows(est)
    assert [round(r[1], 3) for r in rows] == [round(est.resident_gib, 3), round(est.pageable_gib, 3)]
    js = est.to_json()
    assert js["resident_gib"] == pytest.approx(est.resident_gib, abs=1e-3) and js["pageable_gib"] == pytest.approx(est.pageable_gib, abs=1e-3)
    # bitsandbytes brings one parameter's state to the GPU for its update: the largest adapter's, at the step
    step = memory.estimate(dataclasses.replace(q, seq_len=1))
    assert step.phase == "optimizer step" and step.breakdown_gib["temporary buffers"] > 0


def test_the_panel_says_what_pages_out_and_what_it_costs(paper):
    from engine.views.estimate_view import estimate_outputs

    for lang, words in (("en", ("must stay on the GPU", "CPU RAM", "per step")), ("pt-BR", ("precisam ficar na GPU", "RAM da CPU", "por passo"))):
        panel = estimate_outputs(paper[1], "gpu-24gb", lang)
        assert all(w in panel.totals for w in words), panel.totals
        need = panel.tiers.iloc[[i for i, c in enumerate(panel.tiers.iloc[:, 0]) if "24" in str(c)][-1], 1]
        assert "⇄" in need  # the paged part named beside the resident need, not added to it


Q8B = MemoryQuery(model="llama-3.1-8b", task="full", weight_precision="bf16", training_precision="pure-bf16", optimizer="adamw", batch=1,
                  seq_len=1024, grad_ckpt=True)


def test_ddp_keeps_the_whole_model_on_every_gpu_plus_a_gradient_bucket():
    one = memory.estimate(Q8B)
    ddp = memory.estimate(dataclasses.replace(Q8B, distributed="ddp", gpus=2))
    assert ddp.breakdown_gib["weights"] == pytest.approx(one.breakdown_gib["weights"])
    assert ddp.breakdown_gib["optimizer state"] == pytest.approx(one.breakdown_gib["optimizer state"])
    assert ddp.allocated_gib > one.allocated_gib + 0.9 * 2 * one.params / 2**30  # + a bf16 gradient-sized bucket
    assert memory.estimate(dataclasses.replace(Q8B, distributed="ddp", gpus=1)).allocated_gib == pytest.approx(one.allocated_gib)


def test_fsdp_shards_weights_gradients_and_optimizer_state_per_gpu():
    one = memory.estimate(Q8B)
    per = {n: memory.estimate(dataclasses.replace(Q8B, distributed="fsdp", gpus=n)) for n in (2, 4, 8)}
    for n, est in per.items():
        assert est.breakdown_gib["optimizer state"] == pytest.approx(one.breakdown_gib["optimizer state"] / n)
        kept = {str(k): v for k, v in est.details_gib.items()}
        root = next(v for k, v in kept.items() if "lm_head" in k)
        two = next(v for k, v in kept.items() if "two decoder layers" in k)
        # weights: 1/n of everything + the embeddings and lm_head whole + two layers gathered
        assert est.breakdown_gib["weights"] == pytest.approx(one.breakdown_gib["weights"] / n + root + two)
    assert per[2].allocated_gib > per[4].allocated_gib > per[8].allocated_gib
    assert one.tiers["gpu-80gb"] == "no" or one.allocated_gib > per[8].allocated_gib
    # an 8B full fine-tune (AdamW, bf16) does not fit one 24 GB card; split 8 ways, each GPU's share does
    assert one.tiers["gpu-24gb"] == "no" and per[8].tiers["gpu-24gb"] == "fits"


def test_fsdp_qlora_on_two_t4s_is_estimated_per_gpu():
    q = MemoryQuery(model="llama-3.1-8b", task="qlora", batch=1, seq_len=1024, grad_ckpt=True, training_precision="amp-fp16", optimizer="adamw")
    one, two = memory.estimate(q), memory.estimate(dataclasses.replace(q, distributed="fsdp", gpus=2))
    assert two.breakdown_gib["weights"] < one.breakdown_gib["weights"]
    assert two.breakdown_gib["optimizer state"] == pytest.approx(one.breakdown_gib["optimizer state"] / 2)


def test_the_train_config_carries_the_mode_to_the_estimate_and_back():
    from engine.config import TrainConfig
    from engine.estimator.handoff import query_from_train, train_values_from_query

    cfg = TrainConfig(method="qlora", base_model="Qwen/Qwen2.5-1.5B-Instruct", dataset="builtin:dates", distributed="fsdp", gpus=2)
    q = query_from_train(cfg, "fp16")
    assert (q.distributed, q.gpus) == ("fsdp", 2)
    values = train_values_from_query(q)
    assert values["distributed"] == "fsdp" and values["gpus"] == 2


def test_make_it_fit_offers_fsdp_when_ddp_copies_do_not_fit():
    q = dataclasses.replace(Q8B, distributed="ddp", gpus=4)
    assert memory.estimate(q).tiers["gpu-48gb"] == "no"
    sugg = memory.make_it_fit(q, "gpu-48gb")
    fsdp = [s for s in sugg if s.changes == {"distributed": "fsdp"}]
    assert fsdp and fsdp[0].verdict in ("fits", "tight") and "fsdp" in str(fsdp[0].description)
    from engine.estimator.texts import render

    assert "fsdp" in render(fsdp[0].description, "pt-BR") and render(fsdp[0].cost, "pt-BR") != render(fsdp[0].cost, "en")
