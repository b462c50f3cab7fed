"""How long one training step takes on a CPU, roughly: what the estimator says beside a CPU card's memory verdict, so
that "fits" never reads as "practical" (an 8B QLoRA fits in 16 GB of RAM, and one step of it takes hours there).

Training costs about 6 FLOPs per parameter per token when every weight learns (2 forward, 4 backward) and about 4 with
LoRA/QLoRA (the backward pass still goes through every frozen weight, but computes no gradient for it); gradient
checkpointing runs the forward pass once more (+2). A CPU sustains a few tens of GFLOP/s on these matmuls: a torch
fp32 2048x2048 matmul reached 32 GFLOP/s on one thread of a shared 2-core AMD EPYC (`python -c "import torch, time;
a = torch.randn(2048, 2048); t = time.perf_counter(); [a @ a for _ in range(10)]; print(2 * 2048**3 * 10 /
(time.perf_counter() - t) / 1e9)"`), and a 4-8 core laptop a few times that. CPU_GFLOPS is taken at the laptop's end,
an order of magnitude, not a promise: a CPU with fast bf16 (AMX) trains small models faster, and 4-bit weights (QLoRA) are
dequantized at every use, which is slower.
"""

from __future__ import annotations

from ..config import MemoryQuery

CPU_GFLOPS = 50.0  # sustained training throughput assumed for a laptop or a small cloud CPU (see the module docstring)


def train_flops_per_token(params: int, task: str, grad_ckpt: bool) -> float:
    """FLOPs of one trained token: 6 per parameter for full training, 4 with LoRA/QLoRA, +2 with checkpointing."""
    per_param = (6.0 if task == "full" else 4.0) + (2.0 if grad_ckpt else 0.0)
    return per_param * params


def cpu_step_seconds(q: MemoryQuery, params: int, gflops: float = CPU_GFLOPS) -> float | None:
    """Seconds of one optimizer step (micro batch x sequence x accumulation tokens) of this query on a CPU, roughly;
    None for inference (no training step)."""
    if q.task == "inference":
        return None
    tokens = q.batch * q.seq_len * max(1, q.grad_accum)
    return tokens * train_flops_per_token(params, q.task, q.grad_ckpt) / (gflops * 1e9)


__all__ = ["CPU_GFLOPS", "cpu_step_seconds", "train_flops_per_token"]
