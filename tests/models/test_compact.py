"""Tests for engine/models/compact.py: CompactLLM behaves like any Hub causal LM (CPU, offline, tiny configs)."""

from __future__ import annotations

import warnings

import pytest
import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM

from engine.errors import ModelLoadError
from engine.models.compact import PRESETS_FILE, CompactConfig, CompactForCausalLM, compact_presets, load_compact_preset

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]


def tiny_config(**overrides) -> CompactConfig:
    fields = dict(
        vocab_size=100,
        max_position_embeddings=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        dropout=0.0,
        # a wider init than 0.02 spreads the logits of an untrained model, so greedy argmax has no near-ties
        initializer_range=0.2,
    )
    fields.update(overrides)
    return CompactConfig(**fields)


def tiny_model(seed: int = 0, **overrides) -> CompactForCausalLM:
    torch.manual_seed(seed)
    return CompactForCausalLM(tiny_config(**overrides)).eval()


def closed_form_params(cfg: CompactConfig) -> int:
    """Unique parameters of a CompactLLM with biases and tied embeddings, counted by hand."""
    V, P, C, F, L = (
        cfg.vocab_size,
        cfg.max_position_embeddings,
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_hidden_layers,
    )
    embeddings = V * C + P * C  # tokens + positions; lm_head is the token table (tied)
    per_block = 2 * (2 * C) + 4 * (C * C + C) + (C * F + F) + (F * C + C)  # 2 LayerNorms, q/k/v/o, up, down
    return embeddings + L * per_block + 2 * C  # + final LayerNorm


# 1. generation with and without the KV cache ----------------------------------------------------------------


def test_greedy_generation_same_with_and_without_cache():
    model = tiny_model()
    ids = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(1))
    cached = model.generate(ids, max_new_tokens=12, do_sample=False, use_cache=True)
    uncached = model.generate(ids, max_new_tokens=12, do_sample=False, use_cache=False)
    assert cached.shape == (1, 18)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])  # bool mask vs additive float mask
def test_left_padded_batch_generates_like_single_prompts(attn_implementation):
    model = tiny_model()
    model.set_attn_implementation(attn_implementation)
    g = torch.Generator().manual_seed(2)
    short = torch.randint(1, 100, (1, 4), generator=g)
    long = torch.randint(1, 100, (1, 9), generator=g)
    pad = 0
    input_ids = torch.cat([torch.cat([torch.full((1, 5), pad), short], dim=1), long])  # (2, 9), row 0 left-padded
    attention_mask = torch.cat([torch.cat([torch.zeros(1, 5), torch.ones(1, 4)], dim=1), torch.ones(1, 9)]).long()

    kw = dict(max_new_tokens=10, do_sample=False, pad_token_id=pad)
    batched = model.generate(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **kw)
    batched_nocache = model.generate(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kw)
    assert torch.equal(batched, batched_nocache)

    alone_short = model.generate(short, **kw)
    alone_long = model.generate(long, **kw)
    assert torch.equal(batched[0, 9:], alone_short[0, 4:])
    assert torch.equal(batched[1, 9:], alone_long[0, 9:])

    # the padded row's logits on its real tokens match the unpadded forward (positions restart after padding)
    with torch.no_grad():
        padded_logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[0, 5:]
        single_logits = model(short).logits[0]
    torch.testing.assert_close(padded_logits, single_logits, atol=1e-5, rtol=1e-5)


def test_incremental_decoding_with_cache_matches_full_forward():
    model = tiny_model()
    ids = torch.randint(0, 100, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(ids).logits  # (2, 10, V)
        out = model(ids[:, :6], use_cache=True)
        step = model(ids[:, 6:], past_key_values=out.past_key_values, use_cache=True)  # a chunk of 4 on a cache
    assert out.past_key_values.get_seq_length() == 10
    torch.testing.assert_close(torch.cat([out.logits, step.logits], dim=1), full, atol=1e-5, rtol=1e-5)


def test_return_dict_false_gives_a_tuple():
    model = tiny_model()
    ids = torch.randint(0, 100, (1, 5))
    loss, logits = model(ids, labels=ids, use_cache=False, return_dict=False)
    assert loss.ndim == 0 and logits.shape == (1, 5, 100)


# 2. save / load ----------------------------------------------------------------------------------------------


def test_save_and_load_round_trip_keeps_logits_and_tied_weights(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        expected = model(ids).logits

    for loaded in (CompactForCausalLM.from_pretrained(tmp_path), AutoModelForCausalLM.from_pretrained(tmp_path)):
        assert type(loaded) is CompactForCausalLM
        loaded.eval()
        with torch.no_grad():
            torch.testing.assert_close(loaded(ids).logits, expected, atol=0, rtol=0)
        assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight

    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, CompactConfig) and config.hidden_size == 32


def test_auto_classes_know_the_model_and_registration_is_idempotent():
    from engine.models import compact as model_module

    model_module._register()  # what a re-import does: must not raise
    config = AutoConfig.for_model("compact_llm", vocab_size=100, hidden_size=32, num_attention_heads=2)
    assert isinstance(config, CompactConfig)
    assert type(AutoModelForCausalLM.from_config(tiny_config())) is CompactForCausalLM


# 3. parameter count ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", [None, "compact-mini", "compact-course"])
def test_parameter_count_matches_meta_device_and_closed_form(preset):
    cfg = tiny_config() if preset is None else load_compact_preset(preset)
    with torch.device("meta"):
        meta_model = CompactForCausalLM(cfg)
    meta_count = sum(p.numel() for p in meta_model.parameters())  # parameters() yields a tied weight once
    assert meta_count == closed_form_params(cfg)
    if preset is None:  # a real model only for the tiny one (keeps the test fast)
        assert sum(p.numel() for p in CompactForCausalLM(cfg).parameters()) == meta_count


def test_parameter_count_under_init_empty_weights_after_tie_weights():
    from accelerate import init_empty_weights

    cfg = tiny_config()
    with init_empty_weights():
        model = CompactForCausalLM(cfg)
    model.tie_weights()  # transformers 5.23 + accelerate 1.15 leave tied weights untied here (design.md §5)
    assert sum(p.numel() for p in model.parameters()) == closed_form_params(cfg)


# 4. gradient checkpointing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("enable", ["gradient_checkpointing_enable", "activation_checkpointing_enable"])
def test_gradient_checkpointing_gives_same_loss_and_grads(enable):
    # transformers 5.23 renamed it activation_checkpointing_enable (the old name warns, still works)
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(4))
    results = []
    for checkpointing in (False, True):
        model = tiny_model(seed=5).train()
        if checkpointing:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                getattr(model, enable)()
            assert all(layer.gradient_checkpointing for layer in model.model.layers)
        attn_calls: list[int] = []
        model.model.layers[0].self_attn.register_forward_hook(lambda *_, calls=attn_calls: calls.append(1))
        out = model(ids, labels=ids, use_cache=True)  # the cache request is dropped under checkpointing
        out.loss.backward()
        assert len(attn_calls) == (2 if checkpointing else 1)  # checkpointing recomputes the block in backward
        results.append((out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-6, rtol=1e-5, msg=name)


def test_training_builds_no_cache_unless_asked():
    model = tiny_model().train()
    ids = torch.randint(0, 100, (1, 8))
    assert model(ids, labels=ids).past_key_values is None  # Trainer never reads it back: save the memory
    assert model(ids, use_cache=True).past_key_values.get_seq_length() == 8
    assert model.eval()(ids).past_key_values.get_seq_length() == 8  # config.use_cache in eval (generate)


# 5. peft LoRA ------------------------------------------------------------------------------------------------


def test_lora_wraps_and_trains_only_adapters():
    from peft import LoraConfig, get_peft_model

    model = tiny_model().train()
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS))
    wrapped = {n.split(".")[-2] for n, _ in peft_model.named_modules() if n.endswith(".lora_A")}
    assert wrapped == set(LORA_TARGETS)

    ids = torch.randint(0, 100, (2, 12))
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    peft_model(input_ids=ids, labels=ids).loss.backward()
    for name, p in peft_model.named_parameters():
        if "lora_" in name:
            assert p.requires_grad and p.grad is not None, name
        else:
            assert not p.requires_grad and p.grad is None, name
    assert any(p.grad.abs().sum() > 0 for n, p in peft_model.named_parameters() if "lora_B" in n)
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_B" in n}
    optimizer.step()
    assert any(not torch.equal(before[n], p) for n, p in peft_model.named_parameters() if n in before)


# 6. bitsandbytes 4-bit on CPU --------------------------------------------------------------------------------


def test_bitsandbytes_4bit_loading_on_cpu(tmp_path):
    bnb = pytest.importorskip("bitsandbytes")
    from transformers import BitsAndBytesConfig

    tiny_model(hidden_size=64, intermediate_size=256, num_attention_heads=4).save_pretrained(tmp_path)
    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )
    model = AutoModelForCausalLM.from_pretrained(tmp_path, quantization_config=quant, device_map="cpu").eval()
    assert isinstance(model.model.layers[0].self_attn.q_proj, bnb.nn.Linear4bit)
    assert isinstance(model.model.layers[0].mlp.down_proj, bnb.nn.Linear4bit)
    assert not isinstance(model.lm_head, bnb.nn.Linear4bit)  # tied to the embedding, stays unquantized

    ids = torch.randint(0, 100, (2, 7))
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (2, 7, 100) and torch.isfinite(logits).all()
    out = model.generate(ids, max_new_tokens=5, do_sample=False)
    assert out.shape == (2, 12)


# 7. loss and limits ------------------------------------------------------------------------------------------


def test_loss_with_masked_labels_equals_manual_cross_entropy():
    model = tiny_model()
    ids = torch.randint(0, 100, (2, 10))
    labels = ids.clone()
    labels[0, :4] = -100  # e.g. a masked prompt
    labels[1, 7:] = -100  # e.g. padding
    out = model(ids, labels=labels)
    shift_logits = out.logits[:, :-1].reshape(-1, 100)
    shift_labels = labels[:, 1:].reshape(-1)
    expected = torch.nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)

    # Trainer (v5) passes num_items_in_batch for exact averaging under gradient accumulation: sum / that count
    n = int((shift_labels != -100).sum())
    summed = torch.nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=-100, reduction="sum")
    torch.testing.assert_close(model(ids, labels=labels, num_items_in_batch=2 * n).loss, summed / (2 * n))


def test_input_longer_than_max_positions_raises():
    model = tiny_model()
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with torch.no_grad():  # also counting tokens already in the cache
        out = model(torch.zeros(1, 60, dtype=torch.long), use_cache=True)
        with pytest.raises(ValueError, match="max_position_embeddings"):
            model(torch.zeros(1, 5, dtype=torch.long), past_key_values=out.past_key_values)


# 8. presets --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["compact-mini", "compact-course"])
def test_preset_configs_carry_the_yaml_numbers(name):
    raw = yaml.safe_load(PRESETS_FILE.read_text(encoding="utf-8"))[name]
    assert compact_presets()[name] == raw
    assert raw["description"] and raw["pretrain_steps"] > 0
    cfg = load_compact_preset(name)
    assert isinstance(cfg, CompactConfig)
    for key, value in raw.items():
        if key == "description" or key.startswith("pretrain_"):  # recipe metadata, not architecture
            assert not hasattr(cfg, key)
        else:
            assert getattr(cfg, key) == value, key


def test_course_preset_equals_the_config_defaults():
    course, default = load_compact_preset("compact-course"), CompactConfig()
    assert (default.hidden_size, default.num_hidden_layers, default.num_attention_heads) == (384, 6, 6)
    assert (default.intermediate_size, default.max_position_embeddings, default.dropout) == (1536, 1024, 0.1)
    assert course.to_dict() == default.to_dict()


def test_unknown_preset_raises_model_load_error_listing_presets():
    with pytest.raises(ModelLoadError, match="compact-mini.*compact-course"):
        load_compact_preset("compact-huge")
