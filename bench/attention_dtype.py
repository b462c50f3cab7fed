"""Causal attention forward + backward on the CPU in fp32, in bf16, and in bf16 upcast to fp32 around the kernel
(what the compact model does while it trains under CPU bf16 autocast: engine/models/compact.py).

Not a test: prints a markdown table of milliseconds per forward + backward (median of --repeats timings of
--iters calls each) for the attention shapes of the benchmarked recipes (bench/train_throughput.py).

    python bench/attention_dtype.py [--threads 1] [--repeats 5] [--iters 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

# (batch, heads, tokens, head_dim): compact-mini on the date task (16 x 64), a tiny Llama at 256 tokens (8 and 2 rows)
SHAPES = ((16, 4, 64, 48), (8, 4, 256, 64), (2, 4, 256, 64))
MODES = ("fp32", "bf16", "bf16, attention in fp32")


def _step(q0: torch.Tensor, k0: torch.Tensor, v0: torch.Tensor, mode: str) -> None:
    dtype = torch.float32 if mode == "fp32" else torch.bfloat16
    q, k, v = (x.to(dtype).requires_grad_() for x in (q0, k0, v0))
    a, b, c = (q.float(), k.float(), v.float()) if mode == "bf16, attention in fp32" else (q, k, v)
    F.scaled_dot_product_attention(a, b, c, is_causal=True).to(dtype).sum().backward()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the training benchmark uses 1)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); ms per forward + backward, median of {args.repeats}\n")
    print("| shape (batch, heads, tokens, head dim) | " + " | ".join(MODES) + " | bf16 / fp32 | upcast / fp32 |")
    print("|---|" + "---:|" * (len(MODES) + 2))
    for shape in SHAPES:
        q, k, v = (torch.randn(shape) for _ in range(3))
        ms = {}
        for mode in MODES:
            for _ in range(3):
                _step(q, k, v, mode)
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(args.repeats):  # interleaved, so a slower moment of the machine hits every mode
            for mode in MODES:
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    _step(q, k, v, mode)
                times[mode].append((time.perf_counter() - t0) / args.iters * 1e3)
        ms = {m: statistics.median(t) for m, t in times.items()}
        print(f"| {shape} | " + " | ".join(f"{ms[m]:.2f}" for m in MODES)
              + f" | {ms['bf16'] / ms['fp32']:.2f}x | {ms['bf16, attention in fp32'] / ms['fp32']:.2f}x |")


if __name__ == "__main__":
    main()
