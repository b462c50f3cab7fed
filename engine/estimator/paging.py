"""Paged optimizer state on a card: how much of it will live in CPU RAM, and what that costs per optimizer step.

bitsandbytes' paged optimizers keep their state in CUDA unified memory: the driver moves pages to CPU RAM when the
card is full and back when a kernel touches them (bitsandbytes prefetches one parameter's state before its update).
So the state never decides whether a job fits (engine/estimator/memory.py bases the verdict on what must stay
resident); it decides how much slower each optimizer step gets.
"""

from __future__ import annotations

from typing import Any

from .catalog import HardwareTier
from .texts import Msg

GIB = 2**30
# PCIe bandwidth a paged optimizer's state moves at (GB/s, one direction): what pinned host<->device copies reach on a
# PCIe 3.0 x16 link (about 12 of 15.8 GB/s; PCIe 4.0 doubles it). Unified-memory page migration is slower than pinned
# copies, so the cost stated with it is a lower bound.
PCIE_GBPS = 12.0


def paged_out_gib(need: float, paged: float, tier: HardwareTier) -> float:
    """GiB of paged optimizer state that will live in CPU RAM on `tier`: what does not fit beside the resident memory
    `need` (both GiB, as memory.need_gib gives them). Every optimizer step then brings it to the GPU and back."""
    return max(0.0, min(paged, need + paged - tier.usable_gib))


def paging_seconds(out_gib: float) -> float:
    """Extra seconds per optimizer step for `out_gib` of paged state living in CPU RAM: moved in and out once a step."""
    return 2 * out_gib * GIB / (PCIE_GBPS * 1e9)


def residency_rows(est: Any) -> list[list[Any]]:
    """Rows [part, GiB] of a memory.MemoryEstimate's total split by where it can live: what must stay resident on the
    GPU (the verdict's basis) and what may page out to CPU RAM (paged optimizer state); the second only when there is any."""
    rows: list[list[Any]] = [[Msg("estimator.residency.resident"), round(est.resident_gib, 3)]]
    if est.pageable_gib > 0:
        rows.append([Msg("estimator.residency.pageable"), round(est.pageable_gib, 3)])
    return rows
