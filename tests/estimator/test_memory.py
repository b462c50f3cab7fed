"""Memory estimator: hand-computed terms, monotonicity, exact parameter counts, bad inputs, CLI, speed.

Offline and CPU-only: models are built on the meta device (no weights), the Hub is never contacted.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from engine.config import MemoryQuery
from engine.errors import ConfigError, EngineError, ModelLoadError
from engine.estimator import memory
from engine.estimator.architecture import analyze
from engine.estimator.cli import answer_query_line
from engine.estimator.memory import GIB, estimate
from engine.estimator.model_config import arch_from_manual, config_from_dict, resolve

# A tiny Llama-style model whose every number is easy to check by hand:
# h=64, 4 heads (head_dim 16), MLP 128, vocab 1000, 2 layers, untied.
TINY = "manual:L=2,h=64,a=4,kv=4,i=128,v=1000,tied=0"
H, I, V, L = 64, 128, 1000, 2  # noqa: E741 (I is the usual name of the MLP width)
LAYER_LINEAR = 4 * H * H + 3 * H * I  # q,k,v,o + gate,up,down
PARAMS = L * (LAYER_LINEAR + 2 * H) + 2 * V * H + H  # + 2 RMSNorms per layer, embedding, lm_head, final norm


def q(**kw) -> MemoryQuery:
    base = dict(model=TINY, task="lora", weight_precision="bf16", training_precision="amp-bf16", lora_r=16, lora_targets="q,v",
                lora_dropout=0.0, batch=1, seq_len=32, grad_ckpt=False)
    base.update(kw)
    return MemoryQuery(**base)


def bytes_of(est, term: str) -> float:
    return est.breakdown_gib[term] * GIB


# ---------------------------------------------------------------------------------------------- counts


def test_manual_arch_counts_by_hand():
    arch = resolve(TINY)
    assert arch.params_total == PARAMS == 210_240
    assert arch.params_layer_linear == L * LAYER_LINEAR
    assert (arch.hidden, arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.intermediate, arch.vocab) == (H, 4, 4, 16, I, V)
    assert not arch.tied and arch.params_lm_head == V * H and arch.gated_mlp and arch.norm_type == "rms"
    assert arch_from_manual(2, 64, 4, 4, 128, 1000, False) == arch


@pytest.mark.parametrize("model_type,config", [
    ("llama", dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)),
    ("llama", dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, tie_word_embeddings=True)),
    ("gpt2", dict(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    ("gpt_neox", dict(vocab_size=300, hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)),
    ("gemma", dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=8)),
    ("phi3", dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, pad_token_id=0)),
])
def test_meta_count_equals_real_tiny_model(model_type, config):
    """The meta-device count (unique parameters) equals sum(p.numel()) of the same model really built."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = config_from_dict({"model_type": model_type, **config}, where="test")
    arch = analyze(cfg, ref="test", label="test", source="test")
    torch.manual_seed(0)
    real = AutoModelForCausalLM.from_config(cfg)
    unique = {id(p): p.numel() for p in real.parameters()}
    assert arch.params_total == sum(unique.values())
    assert arch.tied == (real.get_output_embeddings().weight is real.get_input_embeddings().weight)


def test_builtin_compact_model_count_matches_real_model():
    import torch

    from engine.models.compact import CompactForCausalLM, load_compact_preset

    arch = resolve("builtin:compact-mini")
    torch.manual_seed(0)
    real = CompactForCausalLM(load_compact_preset("compact-mini"))
    assert arch.params_total == sum({id(p): p.numel() for p in real.parameters()}.values())
    assert arch.tied and arch.norm_type == "ln" and not arch.gated_mlp
    assert {lin.leaf for lin in arch.linears} == {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"}


def test_tied_embeddings_count_once():
    """The design note's pitfall: gemma-2b is 2.51B with ties respected (3.03B if they came out untied)."""
    arch = resolve("gemma-2b")
    assert arch.tied and arch.params_total == 2_506_172_416


# ---------------------------------------------------------------------------------------------- terms


def test_weight_bytes_by_precision():
    lin, rest = L * LAYER_LINEAR, PARAMS - L * LAYER_LINEAR
    inf = dict(task="inference", seq_len=1, new_tokens=0)
    assert bytes_of(estimate(q(weight_precision="fp32", **inf)), "weights") == PARAMS * 4
    assert bytes_of(estimate(q(weight_precision="bf16", **inf)), "weights") == PARAMS * 2
    e8 = estimate(q(weight_precision="int8", **inf))
    assert bytes_of(e8, "weights") == lin * 1 + rest * 2
    assert bytes_of(e8, "quantization constants") == pytest.approx(L * (4 * H + 2 * I + H) * 4)  # one fp32 scale per output row
    e4 = estimate(q(weight_precision="nf4", double_quant=False, **inf))
    assert bytes_of(e4, "weights") == lin * 0.5 + rest * 2
    assert bytes_of(e4, "quantization constants") == pytest.approx(lin * 4 / 64)  # fp32 absmax per 64 weights
    e4dq = estimate(q(weight_precision="nf4", double_quant=True, **inf))
    assert bytes_of(e4dq, "quantization constants") == pytest.approx(lin * (1 / 64 + 4 / (64 * 256)))


def test_quantized_training_keeps_nonquantized_parts_in_fp32():
    """prepare_model_for_kbit_training casts embeddings, lm_head and norms to fp32."""
    lin = L * LAYER_LINEAR
    e = estimate(q(task="qlora", weight_precision="nf4"))
    assert bytes_of(e, "weights") == lin * 0.5 + (PARAMS - lin) * 4


def test_lora_trainable_gradient_and_optimizer_terms():
    r = 16
    n = L * 2 * r * (H + H)  # q and v: r x (d_in + d_out) each
    e = estimate(q(lora_r=r, grad_accum=2))  # accumulation keeps the gradients allocated at the peak
    assert e.trainable_params == n
    assert bytes_of(e, "trainable weights") == n * 4  # peft keeps adapters in fp32
    assert bytes_of(e, "gradients") == n * 4
    assert bytes_of(e, "optimizer state") == n * 8  # AdamW: two fp32 moments
    assert bytes_of(estimate(q(optimizer="sgd")), "optimizer state") == 0
    assert bytes_of(estimate(q(optimizer="adamw-8bit")), "optimizer state") == pytest.approx(n * 2 * (1 + 4 / 256))
    paged = estimate(q(optimizer="paged-adamw-8bit"))
    state = n * 2 * (1 + 4 / 256)
    assert paged.spillable_gib * GIB == pytest.approx(state)
    # paged state is unified memory: in what nvidia-smi shows (the breakdown), not in PyTorch's allocated count
    assert bytes_of(paged, "optimizer state") == pytest.approx(state)
    assert paged.allocated_gib * GIB == pytest.approx(sum(paged.breakdown_gib[t] * GIB for t in memory.TERMS[:-2]) - state)
    pure = estimate(q(training_precision="pure-bf16", lora_r=r))
    assert bytes_of(pure, "trainable weights") == n * 2 and bytes_of(pure, "optimizer state") == n * 4


def test_lora_targets_keys_lists_and_module_names():
    arch = resolve(TINY)
    assert len(arch.lora_modules("all-linear")[0]) == 7
    assert len(arch.lora_modules("attention")[0]) == 4
    assert {m.leaf for m in arch.lora_modules(["q", "v"])[0]} == {"q_proj", "v_proj"}
    assert {m.leaf for m in arch.lora_modules("q_proj,v_proj")[0]} == {"q_proj", "v_proj"}
    mods, head = arch.lora_modules("gate,up,down,lm_head")
    assert {m.leaf for m in mods} == {"gate_proj", "up_proj", "down_proj"} and head
    assert estimate(q(lora_targets="q,v")).trainable_params == estimate(MemoryQuery(**{**dataclasses.asdict(q()), "lora_targets": ["q", "v"]})).trainable_params
    fused = resolve("gpt2")  # c_attn is one fused q/k/v projection: selected once
    assert [m.leaf for m in fused.lora_modules("q,k,v")[0]] == ["c_attn"]


def test_activation_bytes_by_hand():
    """LoRA on q,v over a bf16 base with bf16 autocast, SDPA, no dropout: bytes kept per layer and token."""
    c = 2
    norms = 2 * 4 * H  # two RMSNorms keep an fp32 copy of their input
    frozen_inputs = c * H + c * H + c * H + c * I  # q/k/v input, o input, gate/up input, down input
    lora = 2 * (c * H + c * 16)  # lora_A input cast to bf16 and lora_B's r-wide input, for q and v
    sdpa = c * (2 * H + 2 * H) + 4 * 4  # q, k, v, out + fp32 log-sum-exp per head
    mlp = 3 * c * I  # gate, act(gate), up
    assert (norms, frozen_inputs, lora, sdpa, mlp) == (512, 640, 320, 528, 768)
    per_token = norms + memory.CAL["frozen_input_saved"] * frozen_inputs + lora + sdpa + mlp
    tokens = 32
    expected = L * per_token * tokens + 4 * H * tokens  # + the final norm
    e = estimate(q())
    assert bytes_of(e, "activations") == pytest.approx(expected)
    assert bytes_of(e, "logits/loss") == pytest.approx(12 * V * tokens)  # fp32 log-softmax + its gradients


def test_checkpointing_keeps_one_input_per_layer():
    tokens = 32
    e = estimate(q(grad_ckpt=True, batch=1, seq_len=tokens))
    ckpt = L * 2 * H * tokens + 4 * H * tokens  # bf16 block inputs + final norm
    # at the loss peak the recomputed layer is not alive yet: activations = checkpoints
    assert bytes_of(e, "activations") == pytest.approx(ckpt)


def test_eager_attention_adds_seq_squared():
    small, big = 64, 128
    d_small = bytes_of(estimate(q(attention="eager", seq_len=small)), "activations") - bytes_of(estimate(q(seq_len=small)), "activations")
    d_big = bytes_of(estimate(q(attention="eager", seq_len=big)), "activations") - bytes_of(estimate(q(seq_len=big)), "activations")
    assert d_big / d_small == pytest.approx(4.0, rel=0.15)  # ~ s^2


def test_kv_cache_by_hand():
    e = estimate(q(task="inference", seq_len=1, new_tokens=127, batch=3))
    assert e.phase == "last decoding step"
    tokens = 3 * 128
    assert bytes_of(e, "KV cache") == 2 * L * (4 * 16) * tokens * 2  # 2 (K,V) x layers x kv_dim x tokens x bf16


def test_sliding_window_caps_the_kv_cache():
    long = estimate(MemoryQuery(model="mistral-7b-v0.1", task="inference", seq_len=16000, new_tokens=0))
    kv_dim = 8 * 128
    assert bytes_of(long, "KV cache") == pytest.approx(2 * 32 * kv_dim * 4096 * 2)  # every layer keeps the 4096 window


def test_full_finetune_amp_is_16_bytes_per_param_plus_temporaries():
    e = estimate(q(task="full", weight_precision="fp32", training_precision="amp-bf16", optimizer="adamw"))
    assert e.phase == "optimizer step" or e.phase.endswith("backward")
    assert bytes_of(e, "weights") == PARAMS * 4
    assert bytes_of(e, "optimizer state") == PARAMS * 8
    step = estimate(q(task="full", weight_precision="fp32", optimizer="adamw", seq_len=1))
    # fused AdamW (what engine/training/run.py runs) allocates nothing at the step: the peak is weights + gradients + state
    assert step.phase in ("optimizer step", "end of backward")
    assert bytes_of(step, "gradients") == PARAMS * 4
    assert bytes_of(step, "weights") + bytes_of(step, "gradients") + bytes_of(step, "optimizer state") == PARAMS * 16


def test_totals_context_and_fragmentation():
    e = estimate(q())
    terms = [t for t in memory.TERMS if t not in ("fragmentation", "CUDA context")]
    assert e.allocated_gib == pytest.approx(sum(e.breakdown_gib[t] for t in terms))
    assert e.breakdown_gib["CUDA context"] == memory.CAL["cuda_context_gib"]
    assert e.total_gib == pytest.approx(sum(e.breakdown_gib.values()))
    assert e.total_gib > e.allocated_gib


# ---------------------------------------------------------------------------------------------- monotonicity


@pytest.mark.parametrize("task", ["inference", "lora", "qlora", "full"])
def test_monotonic_in_batch_and_sequence(task):
    base = MemoryQuery(model="qwen2.5-0.5b", task=task)
    for field, values in (("batch", [1, 2, 4, 8, 16]), ("seq_len", [64, 256, 1024, 4096])):
        totals = [estimate(dataclasses.replace(base, **{field: v})).allocated_gib for v in values]
        assert totals == sorted(totals) and totals[0] < totals[-1], (field, totals)


def test_monotonic_in_rank():
    totals = [estimate(MemoryQuery(model="llama-3.2-1b", task="qlora", lora_r=r)).allocated_gib for r in (4, 8, 16, 64, 256)]
    assert totals == sorted(totals) and totals[0] < totals[-1]


def test_fewer_bits_fewer_bytes():
    def weights(wp):
        return estimate(MemoryQuery(model="llama-3.1-8b", task="inference", weight_precision=wp, seq_len=16, new_tokens=0)).breakdown_gib["weights"]

    assert weights("nf4") < weights("int8") < weights("bf16") < weights("fp32")
    assert weights("fp4") == weights("nf4") and weights("fp16") == weights("bf16")


def test_checkpointing_8bit_optimizer_and_targets_reduce_memory():
    base = MemoryQuery(model="llama-3.2-1b", task="qlora", seq_len=2048, batch=4)
    t = estimate(base).allocated_gib
    assert estimate(dataclasses.replace(base, grad_ckpt=True)).allocated_gib < t
    assert estimate(dataclasses.replace(base, optimizer="adamw-8bit")).allocated_gib < t
    assert estimate(dataclasses.replace(base, lora_targets="q,v")).allocated_gib < t
    assert estimate(dataclasses.replace(base, chunked_loss=True)).allocated_gib < t


# ---------------------------------------------------------------------------------------------- verdicts and fitting


def test_tiers_verdicts():
    tiers = estimate(MemoryQuery(model="llama-3.1-8b", task="inference", weight_precision="bf16", seq_len=512)).tiers
    assert set(tiers) == {t.name for t in memory.hardware_tiers()}
    assert tiers["gpu-8gb"] == "no" and tiers["gpu-80gb"] == "fits" and tiers["gpu-24gb"] == "fits"
    assert estimate(MemoryQuery(model="builtin:compact-mini")).tiers["gpu-4gb"] == "fits"


def test_max_batch_and_seq_len_are_the_limits():
    query = MemoryQuery(model="qwen2.5-1.5b", task="qlora", seq_len=1024, grad_ckpt=True)
    b = memory.max_batch(query, "t4-16gb")
    assert b >= 1
    t4 = memory.tier_by_name("t4-16gb")
    assert memory._fits(dataclasses.replace(query, batch=b), t4) and not memory._fits(dataclasses.replace(query, batch=b + 1), t4)
    s = memory.max_seq_len(dataclasses.replace(query, seq_len=128), "gpu-4gb")
    g4 = memory.tier_by_name("gpu-4gb")
    assert 1 <= s < 32768 and memory._fits(dataclasses.replace(query, seq_len=s), g4)
    assert not memory._fits(dataclasses.replace(query, seq_len=s + 1), g4)
    assert memory.max_batch(MemoryQuery(model="llama-3.1-70b", task="full"), "gpu-4gb") == 0


def test_make_it_fit_suggestions_fit_and_are_ranked():
    query = MemoryQuery(model="llama-3.1-8b", task="lora", weight_precision="bf16", batch=4, seq_len=2048, optimizer="adamw")
    assert estimate(query).tiers["t4-16gb"] == "no"
    sugg = memory.make_it_fit(query, "t4-16gb")
    assert sugg and [s.rank for s in sugg] == list(range(1, len(sugg) + 1))
    t4 = memory.tier_by_name("t4-16gb")
    for s in sugg:
        assert s.changes and s.cost
        new = dataclasses.replace(query, **s.changes)
        assert memory._fits(new, t4), s
        assert s.new_total_gib == pytest.approx(memory.need_gib(new, t4)[0], abs=1e-3)
    assert memory.make_it_fit(MemoryQuery(model="builtin:compact-mini"), "t4-16gb") == []


def test_make_it_fit_combines_when_no_single_change_is_enough():
    query = MemoryQuery(model="llama-3.1-8b", task="full", weight_precision="fp32", batch=8, seq_len=2048)
    sugg = memory.make_it_fit(query, "gpu-24gb")
    assert len(sugg) >= 1
    best = sugg[0]
    assert best.changes and memory._fits(dataclasses.replace(query, **best.changes), memory.tier_by_name("gpu-24gb"))


# ---------------------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("field,value", [("batch", 0), ("batch", -3), ("seq_len", 0), ("lora_r", 0), ("new_tokens", -1),
                                         ("task", "pretrain"), ("weight_precision", "int3"), ("optimizer", "lion")])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ConfigError) as exc:
        MemoryQuery(**{field: value})
    assert exc.value.field == field and field in str(exc.value)


def test_unknown_model_and_targets():
    with pytest.raises(ModelLoadError, match="Unknown model"):
        estimate(MemoryQuery(model="definitely not a model"))
    with pytest.raises(ConfigError, match="lora_targets"):
        estimate(MemoryQuery(model=TINY, lora_targets="q,wobble"))
    with pytest.raises(ConfigError, match="model"):
        MemoryQuery(model="  ")


def test_offline_hub_id_gives_a_clear_message(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match="offline"):
        resolve("someone/not-in-the-catalog-7b")


@pytest.mark.parametrize("content,match", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"hidden_size": 64}', "model_type"),
    ('{"model_type": "no_such_arch_xyz"}', "does not know"),
    ('{"model_type": "llama", "hidden_size": 0, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}', "hidden size"),
    ('{"model_type": "llama", "hidden_size": 30, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8}', "not a valid"),
])
def test_malformed_config_json(tmp_path, content, match):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ModelLoadError, match=match):
        resolve(str(path))


def test_uploaded_config_json(tmp_path):
    cfg = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert resolve(str(path)).params_total == PARAMS
    assert estimate(MemoryQuery(model=str(path))).params == PARAMS


@pytest.mark.parametrize("args", [(0, 64, 4, 4, 128, 1000, False), (2, 64, 5, 5, 128, 1000, False), (2, 64, 4, 3, 128, 1000, False),
                                  (2, -64, 4, 4, 128, 1000, False), (2, 64, 4, 4, 128, 1.5, False)])
def test_manual_architecture_rejects_bad_numbers(args):
    with pytest.raises(ConfigError):
        arch_from_manual(*args)


def test_full_finetune_of_quantized_weights_is_explained():
    e = estimate(MemoryQuery(model=TINY, task="full", weight_precision="nf4"))
    assert any("cannot update nf4" in n for n in e.notes)


# ---------------------------------------------------------------------------------------------- CLI and speed


def test_query_lines_give_results_or_errors_naming_the_field():
    ok = answer_query_line(json.dumps({"model": TINY, "task": "lora", "lora_targets": ["q", "v"], "id": "a"}))
    for key in ("allocated_gib", "total_gib", "breakdown_gib", "params", "trainable_params", "tiers"):
        assert key in ok
    assert ok["id"] == "a" and set(ok["tiers"].values()) <= {"fits", "tight", "no"}
    assert answer_query_line('{"model": "gpt2", "batch": 0}', 3) == {"line": 3, "error": answer_query_line('{"model": "gpt2", "batch": 0}', 3)["error"], "field": "batch"}
    assert answer_query_line('{"task": "lora"}')["field"] == "model"
    assert answer_query_line("not json")["field"] is None
    assert answer_query_line('{"model": "no such model"}')["field"] == "model"
    warned = answer_query_line(json.dumps({"model": TINY, "seqlen": 5}))
    assert "allocated_gib" in warned and "seqlen" in warned["warnings"][0]


def test_cli_queries_file(tmp_path, capsys):
    from engine.cli import main

    src = tmp_path / "q.jsonl"
    src.write_text("\n".join([json.dumps({"model": TINY}), '{"model": "gpt2", "seq_len": -1}', "", json.dumps({"model": TINY, "task": "inference"})]))
    out = tmp_path / "out.jsonl"
    assert main(["estimate", "--queries", str(src), "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 3 and "allocated_gib" in results[0] and results[1]["field"] == "seq_len" and "allocated_gib" in results[2]
    assert main(["estimate", "--model", TINY, "--task", "qlora", "--json", "--tier", "gpu-4gb"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["max_batch"] >= 1 and data["tier"] == "gpu-4gb"
    assert main(["estimate", "--model", TINY, "--batch", "0"]) == 2  # clear error, no traceback


def test_estimates_are_fast_once_the_model_is_known():
    query = MemoryQuery(model="llama-3.1-8b", task="qlora", seq_len=1024)
    estimate(query)
    t0 = time.perf_counter()
    for b in range(1, 41):
        estimate(dataclasses.replace(query, batch=b))
    assert (time.perf_counter() - t0) / 40 < 0.05
    t0 = time.perf_counter()
    memory.make_it_fit(dataclasses.replace(query, batch=16, seq_len=4096), "t4-16gb")
    memory.max_batch(query, "t4-16gb")
    memory.max_seq_len(query, "t4-16gb")
    assert time.perf_counter() - t0 < 0.5


def test_breakdown_rows_and_choices():
    e = estimate(q())
    rows = memory.breakdown_rows(e)
    assert [r[0] for r in rows] == list(memory.TERMS) and all(isinstance(r[2], str) and r[2] for r in rows)
    choices = memory.model_choices()
    assert choices[0].startswith("builtin:") and "llama-3.1-8b" in choices and len(choices) >= 27
    assert isinstance(e.to_json()["breakdown_gib"], dict)


def test_engine_errors_are_engine_errors():
    assert issubclass(ModelLoadError, EngineError) and issubclass(ConfigError, EngineError)


@pytest.mark.parametrize(("line", "expected"), [
    ("[" * 100_000 + "]" * 100_000, "line 7: the JSON is nested too deeply to read"),
    ('{"model": "builtin:compact-mini", "batch": {"a": 1}}', "batch"),
    ('{"model": "manual:L=100000000,h=64,a=4,i=128,v=100"}', "layers"),
])
def test_hostile_query_lines_are_one_lines_error(line, expected):
    out = answer_query_line(line, 7)
    assert out["line"] == 7 and expected in out["error"]
