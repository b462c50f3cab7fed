"""A faster dropout for LoRA adapters trained on a CPU.

peft applies dropout to the input of every adapter (`lora_dropout`, 0.05 by default): one random mask of the
layer's input size per adapted layer and step. On a CPU, `torch.dropout` draws each mask element as a double from
the Mersenne twister (`bernoulli_`), which made dropout the largest single cost of a LoRA step of the built-in
model (20% of it, more than the matmuls: bench/train_throughput.py's profile). This dropout draws 64 random
bits per four elements instead and compares 15 of them per element with a threshold: the same Bernoulli mask
(keep probability within 1/65536 of `1 - p`, rescaled by its exact inverse so the expectation is unchanged),
from the same seeded generator, computed in fewer passes over the data (the mask is one fp32 tensor of 0 and the
scale, kept for the backward pass: 4 bytes an element where torch's dropout keeps a bool).

Only the adapters' dropouts on a CPU are replaced (`use_fast_dropout`); a GPU's dropout kernel is already fast.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

_LEVELS = 1 << 15  # the resolution of the threshold: 15 random bits per element


class _Scaled(torch.autograd.Function):
    """y = x * mask for an fp32 mask of 0 and the scale: one multiply each way, computed in fp32 and stored in x's
    dtype (as `torch.dropout` computes a bf16 input), the mask kept for the backward pass."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(mask)
        return torch.mul(x, mask, out=torch.empty_like(x))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (mask,) = ctx.saved_tensors
        return torch.mul(grad, mask, out=torch.empty_like(grad)), None


def dropout_mask(shape: torch.Size, p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """An fp32 tensor of `shape` holding 0 (probability round(p * 2^15) / 2^15) or the inverse of the keep
    probability, so that its mean is exactly 1. Four elements per random int64 (its 63 random bits hold four
    15-bit lanes)."""
    n = math.prod(shape)
    drop = round(p * _LEVELS)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    lanes = words.view(torch.int16)[:n].bitwise_and_(_LEVELS - 1)  # the top lane's sign bit is 0 anyway
    # compared and scaled in place as fp32 (exact for 15-bit integers): 4x faster than an int16 comparison into a
    # bool tensor times a scalar, which CPU kernels do element by element
    return lanes.float().ge_(drop).mul_(_LEVELS / (_LEVELS - drop)).view(shape)


class FastDropout(nn.Module):
    """`nn.Dropout(p)` with the cheaper mask of `dropout_mask` while training on a CPU; torch's dropout elsewhere."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return nn.functional.dropout(x, self.p, self.training)
        return _Scaled.apply(x, dropout_mask(x.shape, self.p, x.device))

    def extra_repr(self) -> str:
        return f"p={self.p}"


def use_fast_dropout(model: nn.Module) -> int:
    """Replace the LoRA adapters' dropouts of `model` (peft's `lora_dropout` dicts) by `FastDropout`; returns
    how many were replaced (0 for a model without adapters, or with dropout 0)."""
    replaced = 0
    for module in model.modules():
        dropouts = getattr(module, "lora_dropout", None)
        if not isinstance(dropouts, nn.ModuleDict):
            continue
        for name, layer in dropouts.items():
            if type(layer) is nn.Dropout and layer.p > 0:
                dropouts[name] = FastDropout(layer.p)
                replaced += 1
    return replaced
