"""The adapters' CPU dropout (engine/training/fast_dropout.py) is a dropout: the right keep rate, an unbiased
scale, the same mask in the backward pass, reproducible from the seed, and only peft's dropouts are replaced."""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model

from engine.models.compact import CompactConfig, CompactForCausalLM
from engine.training.fast_dropout import FastDropout, dropout_mask, use_fast_dropout


def test_keep_rate_and_scale_match_p():
    torch.manual_seed(0)
    mask = dropout_mask(torch.Size([1000, 1001]), 0.05)  # an odd size: the last random word is cut
    assert mask.shape == (1000, 1001) and mask.dtype == torch.float32
    keep = mask != 0
    assert abs(keep.float().mean().item() - 0.95) < 0.002  # 1,001,000 draws: the standard error is 0.0002
    scale = 2**15 / (2**15 - round(0.05 * 2**15))  # the exact inverse of the keep rate
    assert torch.all(mask[keep] == torch.tensor(scale, dtype=torch.float32))
    # the four 15-bit lanes of a random word are all uniform (none may be stuck)
    lanes = keep.flatten()[: 4 * 250_000].view(-1, 4).float().mean(0)
    assert torch.all((lanes - 0.95).abs() < 0.005), lanes


def test_a_bf16_input_stays_bf16_and_is_scaled_in_fp32():
    torch.manual_seed(2)
    x = torch.randn(64, 48).bfloat16().requires_grad_()
    y = FastDropout(0.05).train()(x)
    kept = y != 0
    scale = 2**15 / (2**15 - round(0.05 * 2**15))
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y[kept], (x[kept].float() * scale).bfloat16(), rtol=0, atol=0)


def test_forward_and_backward_use_one_mask():
    torch.manual_seed(1)
    x = torch.randn(64, 48, requires_grad=True)
    drop = FastDropout(0.3).train()
    y = drop(x)
    kept = y != 0
    scale = 2**15 / (2**15 - round(0.3 * 2**15))
    torch.testing.assert_close(y[kept], x[kept] * scale)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.float() * scale)
    assert 0.6 < kept.float().mean().item() < 0.8


def test_seeded_like_torch_and_off_in_eval():
    drop = FastDropout(0.1)
    x = torch.randn(32, 16)
    torch.manual_seed(3)
    a = drop(x)
    torch.manual_seed(3)
    assert torch.equal(a, drop(x))
    drop.eval()
    assert torch.equal(drop(x), x)
    assert torch.equal(FastDropout(0.0).train()(x), x)


def test_replaces_only_the_adapters_dropouts():
    torch.manual_seed(0)
    base = CompactForCausalLM(CompactConfig(vocab_size=64, max_position_embeddings=32, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64, dropout=0.1))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM"))
    keys = set(model.state_dict())
    adapted = sum(1 for name, _ in model.named_modules() if name.endswith("lora_dropout"))
    assert use_fast_dropout(model) == adapted > 0
    assert set(model.state_dict()) == keys  # nothing to save or load changed
    assert sum(isinstance(m, FastDropout) for m in model.modules()) == adapted
    assert sum(type(m) is torch.nn.Dropout and m.p == 0.1 for m in model.modules()) > 0  # the model's own dropouts stay
    ids = torch.randint(0, 64, (2, 16))
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if p.requires_grad)
    assert use_fast_dropout(base) == 0  # already replaced


def test_dropout_zero_is_left_alone():
    base = CompactForCausalLM(CompactConfig(vocab_size=64, max_position_embeddings=32, hidden_size=32, num_hidden_layers=1,
                                            num_attention_heads=4, intermediate_size=64, dropout=0.0))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert use_fast_dropout(model) == 0
