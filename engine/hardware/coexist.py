"""Generation beside a running training job: go ahead when both fit on the GPU, otherwise say so.

A training subprocess and the playground share one GPU. Loading a model the card cannot hold next to the
run could push the *training* process out of memory, losing its progress since the last checkpoint. On CUDA
we compare the free memory the driver reports with what the model needs (its weights, from the estimator,
plus a margin for the KV cache and activations) before loading. On a CPU both always run (RAM is shared and
swaps instead of failing), which is why this check only applies to CUDA.
"""

from __future__ import annotations

from ..errors import GenerationError

MARGIN = 1.25  # weights x 1.25 + 0.5 GiB: KV cache, prefill activations and allocator slack of a playground request


def check_room_to_generate(need_weights_gib: float, *, training_run: str | None, free_gib: float | None) -> None:
    """Raise a GenerationError explaining what to do when a generation would not fit beside a training run.

    need_weights_gib: the model's weights (estimator or footprint); free_gib: free GPU memory (None on CPU).
    """
    if training_run is None or free_gib is None:
        return
    need = need_weights_gib * MARGIN + 0.5
    if need > free_gib:
        raise GenerationError(key="visitor_error.gpu_busy", run=training_run, free=round(free_gib, 1), need=round(need, 1))


def cuda_free_gib() -> float | None:
    """Free memory on the current CUDA device as the driver sees it (other processes included), None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    from .t4 import emulated_free_gib, emulating_t4

    free, _total = torch.cuda.mem_get_info()
    if emulating_t4():  # COMPACT_LAB_EMULATE_T4=1: what a T4's cap leaves, not the big card's free memory
        return emulated_free_gib(free / 2**30, torch.cuda.memory_reserved())
    return free / 2**30
