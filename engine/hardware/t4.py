"""T4 conditions on any CUDA card: the developer switch `COMPACT_LAB_EMULATE_T4=1` (tests, the GPU kit; never the form).

The app is for people on a free Colab T4, and the GPU lent to this project's work is an H100 or H200. Under the switch
the engine's device detection (engine/hardware/device.py `detect_device`) reports a T4 on whatever CUDA card is there:

| what                     | the real card (H200)   | under the switch                                        |
|--------------------------|------------------------|---------------------------------------------------------|
| compute capability       | 9.0                    | 7.5 (Turing)                                            |
| bf16                     | yes                    | no: `auto` = fp16 with the grad scaler, Gemma = fp32    |
| memory the engine sees   | ~139 GiB               | 15.0 GiB (nvidia-smi's 15360 MiB on Colab)              |
| memory the process gets  | everything             | capped at a T4's usable 14.7 GiB (presets/hardware.yaml |
|                          |                        | `t4-16gb`) with `torch.cuda.set_per_process_memory_fraction` |
| free memory (merge plan, | the driver's figure    | what the cap leaves: cap minus what torch has reserved  |
| playground beside a run) |                        |                                                         |
| device_map="auto" budget | accelerate's own       | the cap (so offload decisions are a T4's)               |

So the real decisions run on real CUDA kernels: the precision policy, fp16 AMP with its grad scaler, the family rule,
the merge placement, the estimator's verdict for "this card", and running out of memory where a T4 would (the
allocator raises `torch.OutOfMemoryError` at the cap, which the run reports as kind `oom`). What it cannot emulate: a
T4's speed, its kernels (bitsandbytes and SDPA pick kernels by the real card) and fp16 numerics that differ by
architecture. Without CUDA the switch does nothing (the CPU stand-in for a T4 is `COMPACT_LAB_CPU_FP16_AMP=1`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV_EMULATE_T4 = "COMPACT_LAB_EMULATE_T4"
GIB = 2**30


@dataclass(frozen=True)
class EmulatedCard:
    """The card the switch makes the engine see (numbers of presets/hardware.yaml's `t4-16gb` tier)."""

    name: str = "Tesla T4"
    capability: tuple[int, int] = (7, 5)
    total_gib: float = 15.0  # nvidia-smi on Colab: 15360 MiB
    usable_gib: float = 14.7  # what one process really gets there (hardware.yaml t4-16gb usable_gib)


T4 = EmulatedCard()


def emulating_t4(env: dict[str, str] | None = None) -> bool:
    """Whether the switch is on (`COMPACT_LAB_EMULATE_T4=1`)."""
    return (os.environ if env is None else env).get(ENV_EMULATE_T4, "") == "1"


def memory_fraction(real_total_bytes: int, card: EmulatedCard = T4) -> float:
    """The share of the real card that leaves a process a T4's usable memory (1.0 on a card smaller than that)."""
    if real_total_bytes <= 0:
        return 1.0
    return min(1.0, card.usable_gib * GIB / real_total_bytes)


def cap_process_memory(device_index: int = 0, card: EmulatedCard = T4) -> float:
    """Cap this process's CUDA allocations at the emulated card's usable memory; returns the fraction set.

    `set_per_process_memory_fraction` makes torch's caching allocator raise `torch.OutOfMemoryError` once the memory
    it has reserved would pass fraction x the card's total, as a T4 would run out; calling it again is harmless."""
    import torch

    total = torch.cuda.get_device_properties(device_index).total_memory
    fraction = memory_fraction(total, card)
    torch.cuda.set_per_process_memory_fraction(fraction, device_index)
    return fraction


def emulated_free_gib(real_free_gib: float, reserved_bytes: int, card: EmulatedCard = T4) -> float:
    """Free memory as the capped process sees it: what the cap leaves after torch's reserved memory, never more than
    the driver's own figure (another process on the card still counts)."""
    return max(0.0, min(real_free_gib, card.usable_gib - reserved_bytes / GIB))


def emulated_max_memory(card: EmulatedCard = T4) -> dict[int | str, str] | None:
    """accelerate's `max_memory` for `device_map="auto"` under the switch (the GPU budget of a T4), else None."""
    if not emulating_t4():
        return None
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 0
    budget: dict[int | str, str] = {0: f"{card.usable_gib:.1f}GiB"}
    if ram:
        budget["cpu"] = f"{ram * 0.8 / GIB:.0f}GiB"  # accelerate's own default keeps a share of RAM free too
    return budget
