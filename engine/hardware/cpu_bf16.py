"""Is bf16 fast on this CPU? A matmul micro-benchmark, measured once and cached.

Many current CPUs (Intel AMX / AVX512-BF16, recent ARM) run a bf16 matmul several times faster than fp32 (7-8x on
the machine this was written on), and bf16 autocast makes a whole training step of the built-in model 1.7-1.9x
faster. Elsewhere bf16 is emulated by upcasting and is *slower* than fp32. The CPU flags do not say which (oneDNN
picks kernels at run time), so we measure: the best of a few repetitions of one fp32 and one bf16 matmul of a
typical layer's size, a few milliseconds in all. The answer is cached for the process and on disk (keyed by the
CPU's name and the torch version), so the app, its training subprocesses and the CLI agree without measuring again
under load.

`COMPACT_LAB_CPU_BF16=1|0` forces the answer (tests, or a machine where the measurement misleads).
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from pathlib import Path

import torch

from ..i18n import norm_lang, t

ENV_FORCE = "COMPACT_LAB_CPU_BF16"
# bf16 must beat fp32 clearly: autocast adds casts around every matmul, so a small matmul win is lost in a step.
MIN_SPEEDUP = 1.5
_SHAPE = (256, 512, 512)  # (tokens, in, out): a small model's projection on a micro-batch


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "compact-llm-lab" / "cpu_bf16.json"


def _key(cpu_name: str) -> str:
    return f"{cpu_name}|torch {torch.__version__}|threads {torch.get_num_threads()}"


def measure_speedup(repeats: int = 5) -> float:
    """fp32 time / bf16 time of one matmul of `_SHAPE` (best of `repeats` after a warm-up); 0.0 when bf16 fails."""
    m, k, n = _SHAPE
    gen = torch.Generator().manual_seed(0)
    a32, b32 = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    try:
        a16, b16 = a32.bfloat16(), b32.bfloat16()
        best = {}
        for name, (a, b) in (("fp32", (a32, b32)), ("bf16", (a16, b16))):
            a @ b  # warm-up: kernel selection, buffer allocation
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                a @ b
                times.append(time.perf_counter() - start)
            best[name] = min(times)
    except RuntimeError:  # a torch build without CPU bf16 kernels
        return 0.0
    return best["fp32"] / max(best["bf16"], 1e-9)


@cache
def bf16_speedup(cpu_name: str) -> float:
    """The cached fp32/bf16 matmul speed ratio of this CPU (see the module docstring)."""
    path, key = _cache_file(), _key(cpu_name)
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(cached, dict) and isinstance(cached.get(key), (int, float)):
            return float(cached[key])
    except (OSError, ValueError):
        cached = {}
    speedup = round(measure_speedup(), 2)
    try:  # best effort: a read-only home only costs a re-measurement next time
        path.parent.mkdir(parents=True, exist_ok=True)
        data = cached if isinstance(cached, dict) else {}
        data[key] = speedup
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
    return speedup


def bf16_is_fast(cpu_name: str) -> bool:
    """Whether training and inference on this CPU should compute in bf16 (autocast with fp32 master weights)."""
    forced = os.environ.get(ENV_FORCE, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    return bf16_speedup(cpu_name) >= MIN_SPEEDUP


def bf16_reason(cpu_name: str, lang: str = "en") -> str:
    """One line saying why `auto` computes in bf16 or fp32 on this CPU, in `lang`, for the UI and the logs."""
    forced = os.environ.get(ENV_FORCE, "").strip()
    if forced:
        return t("text.precision.forced_on" if bf16_is_fast(cpu_name) else "text.precision.forced_off", lang, var=ENV_FORCE, value=forced)
    speedup = bf16_speedup(cpu_name)
    times = f"{speedup:.1f}" if norm_lang(lang) == "en" else f"{speedup:.1f}".replace(".", ",")  # 3.0x / 3,0x
    if speedup >= MIN_SPEEDUP:
        return t("text.precision.cpu_bf16", lang, speedup=times)
    if speedup <= 0:
        return t("text.precision.cpu_no_kernels", lang)
    return t("text.precision.cpu_fp32", lang, speedup=times)


def attention_in_fp32(query: torch.Tensor) -> bool:
    """Should this attention run in fp32? Yes while training on a CPU in bf16 (bf16 inputs, or autocast to bf16):
    torch's CPU flash-attention backward is 2.5-2.8x slower in bf16 than in fp32 at 64-256 tokens
    (bench/attention_dtype.py), and attention is a small share of a step's FLOPs, so the casts cost less than they
    save. Generation (no gradients) keeps bf16, whose forward is as fast."""
    if query.device.type != "cpu" or not torch.is_grad_enabled():
        return False
    return query.dtype == torch.bfloat16 or (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)


KERNEL_CACHE_ENV, KERNEL_CACHE_SIZE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY", "32"


def bound_kernel_cache() -> None:
    """Keep at most 32 of oneDNN's compiled CPU kernels (default 1024), for a training process, before its first
    matmul (oneDNN reads the setting once). A bf16 kernel is built per matmul shape and keeps its own copy of the
    reordered weights; with micro-batches of many shapes the cache only grows: a tiny Llama's LoRA over 3 epochs
    peaked at 171 MiB with the default and 129 MiB with 32, at the same speed (bench/train_throughput.py). A value
    already in the environment wins."""
    os.environ.setdefault(KERNEL_CACHE_ENV, KERNEL_CACHE_SIZE)
