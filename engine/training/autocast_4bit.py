"""4-bit layers that behave like torch's own Linear under autocast: their output in the autocast dtype.

Under autocast, torch's `Linear` takes its input in the autocast dtype (bf16 on a CPU) and returns bf16. A
bitsandbytes `Linear4bit` is not autocast-aware: it casts its input to its compute dtype, multiplies, and casts the
result back to the *input's* dtype (`.to(inp_dtype)`). In a QLoRA model the residual stream stays fp32 (the
embeddings and norms are not quantized), so every 4-bit projection's output went back to fp32: the LoRA sum,
SiLU, the gate product and the next projection's input all ran in fp32, with an fp32 copy of each
`tokens x intermediate` tensor forward and backward (`copy_` was 10% of a tiny Llama's QLoRA step on a CPU, and a
quarter of it these casts).

`autocast_4bit_outputs` gives each 4-bit layer an input already in the autocast dtype while autocast is on and
that dtype is the layer's compute dtype. The layer computes exactly what it computed before (it made the same cast
itself); its output now stays in that dtype, as a non-quantized LoRA model's does under autocast. Without autocast
(generation, fp32 runs), or with a different compute dtype, nothing changes.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.bnb_safety import linear4bit_modules


def _autocast_input(module: nn.Module, args: tuple) -> tuple | None:
    """Forward pre-hook: the floating input in the autocast dtype when it is also the layer's compute dtype."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    x = args[0]
    kind = x.device.type
    if not x.is_floating_point() or not torch.is_autocast_enabled(kind):
        return None
    dtype = torch.get_autocast_dtype(kind)
    if x.dtype == dtype or getattr(module, "compute_dtype", None) != dtype:
        return None
    return (x.to(dtype), *args[1:])


def autocast_4bit_outputs(model: nn.Module) -> int:
    """Register `_autocast_input` on every bitsandbytes 4-bit linear layer of `model`; returns how many (0 for a
    model that is not quantized in 4-bit, or when bitsandbytes is not installed)."""
    layers = linear4bit_modules(model)
    for layer in layers:
        layer.register_forward_pre_hook(_autocast_input)
    return len(layers)
