"""Guard against bitsandbytes' CPU repacking of 4-bit weights (design.md §6, "Hazard").

bitsandbytes 0.50 `Linear4bit.forward` converts its 4-bit weight into an AVX512-BF16 inference layout
(`_convert_weight_packed_for_cpu`) the first time it runs on a CPU with AVX512-BF16, in eval mode, on an
input that does not require grad: exactly what `generate`, the playground and Trainer evaluation do. The
conversion is permanent for the layer, and afterwards `matmul_4bit` takes an inference-only kernel
(`gemv_4bit`, which has no autograd formula) on CPU. A QLoRA model that was used for inference and then
trained gets wrong LoRA gradients (in our test up to 110% off) while its loss is unchanged, so nothing
visibly fails; on layers with a bias the backward raises an in-place RuntimeError instead.
tests/test_bnb_safety.py shows both.

Two remedies, both here:
- `disable_cpu_repack` switches the conversion off per layer (`support_avx512bf16_for_cpu = False`, the
  attribute bitsandbytes reads). `load_model` calls it on every 4-bit model it returns. Cost: CPU 4-bit
  inference uses the generic dequantize+matmul path instead of the packed bf16 kernel. Measured on a
  2-core AVX512-BF16 CPU, greedy decoding after a 218-token prompt (best of 4, noisy shared machine):
  compact-mini 269 vs 369 tok/s, compact-course 61-135 vs 196-212 tok/s, a 0.2B Llama-shaped model
  9-11 vs 42-52 tok/s (guarded vs repacked; fp32 unquantized: 625, 148, 19.5 tok/s). Greedy outputs
  were identical. A caller that only ever generates may opt out with `load_model(allow_cpu_repack=True)`.
- `undo_cpu_repack` converts already-repacked layers back, the way bitsandbytes' own `_save_to_state_dict`
  does. It is a best-effort inverse: the packed layout stored the block scales (absmax) in bf16, so the
  restored weights differ from the original ones by bf16 rounding of the scales (~0.3% in the gradients in
  our test). Prefer never repacking; undo is for models that came from elsewhere.

bitsandbytes is imported lazily: this module is safe to import where bitsandbytes is missing.
"""

from __future__ import annotations

from typing import Any

import torch


def linear4bit_modules(model: torch.nn.Module) -> list[Any]:
    """Every bitsandbytes 4-bit linear layer of `model` (none when bitsandbytes is not installed)."""
    try:
        import bitsandbytes as bnb
    except ImportError:  # no bitsandbytes -> there can be no 4-bit layer to guard
        return []
    return [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]


def disable_cpu_repack(model: torch.nn.Module) -> int:
    """Stop every bitsandbytes Linear4bit in `model` from repacking its weight on CPU; returns how many."""
    layers = linear4bit_modules(model)
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def is_repacked(layer: Any) -> bool:
    """Whether a Linear4bit's weight is in the CPU inference layout."""
    state = getattr(layer.weight, "quant_state", None)
    return bool(getattr(state, "packing_format_for_cpu", False))


def undo_cpu_repack(model: torch.nn.Module) -> int:
    """Convert every already-repacked Linear4bit back to the standard 4-bit layout; returns how many."""
    from bitsandbytes.functional import _convert_weight_packed_for_cpu_inverse

    undone = 0
    for layer in linear4bit_modules(model):
        if not is_repacked(layer):
            continue
        weight = layer.weight
        weight.data, weight.quant_state = _convert_weight_packed_for_cpu_inverse(weight.data, weight.quant_state)
        # Linear4bit keeps a second reference to the state (used to recover it after FSDP-style conversions).
        layer.quant_state = weight.quant_state
        undone += 1
    return undone


def count_repacked(model: torch.nn.Module) -> int:
    """How many Linear4bit layers of `model` are currently in the CPU inference layout."""
    return sum(is_repacked(layer) for layer in linear4bit_modules(model))


def prepare_for_training(model: torch.nn.Module) -> int:
    """Make a (possibly already used) 4-bit model safe to train: undo repacks, then forbid new ones.

    Returns the number of layers that had been repacked. Call it before wrapping the model with peft and
    again is harmless.
    """
    undone = undo_cpu_repack(model)
    disable_cpu_repack(model)
    return undone
