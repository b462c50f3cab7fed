"""Attention runs in fp32 while a model trains under CPU bf16 autocast (engine/hardware/cpu_bf16.py
`attention_in_fp32`): in the compact model's own attention and, inside `fp32_attention`, in transformers' "sdpa"
attention; generation keeps bf16, and the library's function is restored afterwards."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from engine.models.compact import CompactConfig, CompactForCausalLM
from engine.training.fp32_attention import fp32_attention


def _model(kind: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa"))
    else:
        model = CompactForCausalLM(CompactConfig(vocab_size=97, max_position_embeddings=64, hidden_size=32, num_hidden_layers=2,
                                                 num_attention_heads=4, intermediate_size=64, dropout=0.0))
    return model.to(dtype).train()


def _kernel_dtypes(model: torch.nn.Module, *, grad: bool) -> set[torch.dtype]:
    """The dtypes the attention kernel itself receives (below autocast, which may recast SDPA's inputs)."""
    seen = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "scaled_dot_product" in func.__name__:
                seen.add(args[0].dtype)
            return func(*args, **(kwargs or {}))

    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16), Record():
        out = model(input_ids=ids, labels=ids)
    if grad:
        assert out.logits.dtype == torch.bfloat16  # the projections and the head stay in bf16
        out.loss.backward()
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # fp32 weights (full, QLoRA's upcast rest), bf16 (LoRA base)
def test_compact_attention_runs_in_fp32_while_training(dtype):
    model = _model("compact", dtype)
    assert _kernel_dtypes(model, grad=True) == {torch.float32}
    assert _kernel_dtypes(model, grad=False) == {torch.bfloat16}  # generation keeps the bf16 kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transformers_sdpa_runs_in_fp32_inside_the_context_only(dtype):
    model = _model("llama", dtype)
    library = ALL_ATTENTION_FUNCTIONS["sdpa"]
    assert _kernel_dtypes(model, grad=True) == {torch.bfloat16}  # the library's own behaviour
    with fp32_attention():
        assert _kernel_dtypes(model, grad=True) == {torch.float32}
        assert _kernel_dtypes(model, grad=False) == {torch.bfloat16}
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is library
    with pytest.raises(RuntimeError), fp32_attention():
        raise RuntimeError("a failed step")
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is library


def test_fp32_attention_changes_the_loss_by_rounding_only():
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(2))
    model = _model("llama")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model(input_ids=ids, labels=ids).loss.item()
    with fp32_attention(), torch.autocast("cpu", dtype=torch.bfloat16):
        upcast = model(input_ids=ids, labels=ids).loss.item()
    assert upcast == pytest.approx(plain, rel=1e-2)
