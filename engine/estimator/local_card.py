"""This machine's card, for the estimator's default: the first NVIDIA GPU (its name and memory, read with nvidia-smi)
or else the machine's RAM, mapped to the nearest hardware tier of presets/hardware.yaml.

Cheap on purpose: no torch import, no CUDA context, no benchmark. The page's default must not cost time or the GPU
memory it is about to estimate (engine/hardware/device.py's detection creates a CUDA context and, on a CPU, times a
bf16 matmul).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from .catalog import hardware_tiers

FALLBACK_TIER = "t4-16gb"  # no GPU and too little RAM for a CPU tier: the card most students train on (free Colab)
_GENERIC = {"gpu", "cpu"}  # tier name prefixes that are not a card's name


@dataclass(frozen=True)
class LocalCard:
    """What the estimator needs to know about this machine's card (or CPU)."""

    kind: str  # "gpu" | "cpu"
    name: str
    total_gib: float
    bf16: bool | None  # native bf16 (compute capability >= 8); None when the driver does not say


def _nvidia_smi() -> LocalCard | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    # compute_cap needs a 2021+ driver; an older one refuses the field, so ask again without it
    for fields in ("name,memory.total,compute_cap", "name,memory.total"):
        try:
            out = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode == 0 and out.stdout.strip():
            parts = [p.strip() for p in out.stdout.splitlines()[0].split(",")]
            try:
                total = float(parts[1]) / 1024  # MiB
            except (IndexError, ValueError):
                return None
            cap = parts[2] if len(parts) > 2 else ""
            bf16 = int(cap.split(".")[0]) >= 8 if cap[:1].isdigit() else None
            return LocalCard("gpu", parts[0], total, bf16)
    return None


def _ram_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


def detect_card() -> LocalCard:
    """The first NVIDIA GPU, else the CPU with this machine's RAM."""
    return _nvidia_smi() or LocalCard("cpu", "CPU", _ram_gib(), None)


def nearest_tier(card: LocalCard) -> str:
    """The tier that describes `card`: the one its name names (a T4 is `t4-16gb`, an A10G `a10g-24gb`) when the memory
    agrees, else the largest tier of its kind whose memory it has (3% slack: cards report a little less than their
    nominal size) and whose bf16 it has; a GPU below every GPU tier gets the smallest; a CPU below every CPU tier gets
    FALLBACK_TIER."""
    tiers = [t for t in hardware_tiers() if t.kind == card.kind]
    if card.kind == "gpu":
        words = set(re.findall(r"[a-z0-9]+", card.name.lower()))
        for t in tiers:
            prefix = t.name.split("-")[0]
            if prefix not in _GENERIC and prefix in words and abs(t.total_gib - card.total_gib) <= 0.15 * t.total_gib:
                return t.name
    fitting = [t for t in tiers if t.total_gib <= card.total_gib * 1.03 and not (t.bf16 and card.kind == "gpu" and card.bf16 is False)]
    if fitting:
        return max(fitting, key=lambda t: (t.usable_gib, t.bf16)).name
    if card.kind == "gpu" and tiers:
        return min(tiers, key=lambda t: t.usable_gib).name
    names = [t.name for t in hardware_tiers()]
    return FALLBACK_TIER if FALLBACK_TIER in names else names[0]


@functools.lru_cache(maxsize=1)
def default_tier() -> str:
    """This machine's tier, detected once per process (the estimator's "Your card" default)."""
    return nearest_tier(detect_card())
