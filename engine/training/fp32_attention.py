"""Attention in fp32 while a transformers model trains under CPU bf16 autocast.

torch's CPU flash-attention backward is much slower in bf16 than in fp32 (2.8x at 64 tokens; 2.5x inside a tiny
Llama's packed 256-token rows: bench/attention_dtype.py), while attention is a small share of a step's FLOPs. So
during training on a CPU in bf16 (`engine.hardware.cpu_bf16.attention_in_fp32`: bf16 inputs, or fp32 ones that
autocast would cast, as in QLoRA) the "sdpa" attention of transformers' models (Llama, Qwen, Mistral, ...) gets its
query, key and value in fp32 with autocast off, and its output is cast back: the projections around it keep bf16's
fast matmuls. Generation (no gradients) and every other device keep the library's kernel unchanged. The
compact model does the same in its own attention (engine/models/compact.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..hardware.cpu_bf16 import attention_in_fp32


def upcast(sdpa: Callable[..., Any]) -> Callable[..., Any]:
    """`sdpa` (transformers' attention-interface signature) running in fp32 where `attention_in_fp32` says so."""

    def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                  **kwargs: Any) -> tuple[torch.Tensor, Any]:
        if not attention_in_fp32(query):
            return sdpa(module, query, key, value, attention_mask, **kwargs)
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.float()
        with torch.autocast("cpu", enabled=False):  # autocast would cast SDPA's inputs back to bf16
            out, weights = sdpa(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)
        return out.to(query.dtype), weights

    return attention


@contextlib.contextmanager
def fp32_attention() -> Iterator[None]:
    """While inside: transformers' "sdpa" attention is `upcast` (restored on exit, also after an error)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    library = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = upcast(library)
    try:
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = library
