"""Section f, playground generation on CUDA at 16, 8 and 4 bits: time to first token and tokens/s, through the
playground's own streaming path (engine/inference/generate.py `stream_generate`, the model loaded by
engine/models/loading.py as the playground loads it), on the Llama-3.2-1B shape with random weights (speed does not
depend on the weight values). Per precision: one warm-up, then `REPEATS` greedy generations of `NEW_TOKENS` tokens
(min and median), the peak allocated memory, and the load time.

Dry run: a tiny Llama on the CPU, 8 new tokens, the same three loads (bitsandbytes runs 4- and 8-bit on a CPU too).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .common import Context, build_model

TITLE = "playground generation (TTFT, tokens/s at 16/8/4 bits)"
CAP_S = 30
NEEDS_CUDA = False  # the dry run runs it on the CPU with a tiny model
SHAPE = "llama-3.2-1b"
NEW_TOKENS = 64
REPEATS = 3
PROMPT = "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD)."


def run(ctx: Context) -> None:
    import torch

    from engine.config import GenerationSettings, QuantSettings
    from engine.inference.generate import stream_generate
    from engine.models.loading import load_model

    shape = "tiny" if ctx.dry_run else SHAPE
    model_dir = build_model(shape, ctx.work / "models" / shape, device="cpu" if ctx.dry_run else "cuda")
    new_tokens, repeats = (8, 1) if ctx.dry_run else (NEW_TOKENS, REPEATS)
    settings = GenerationSettings(max_new_tokens=new_tokens, do_sample=False)
    for label, mode in (("16-bit", "none"), ("8-bit", "8bit"), ("4-bit", "4bit")):
        with ctx.part(label, min_left_s=5) as part:
            if part is None:
                continue
            t0 = time.perf_counter()
            loaded = load_model(str(model_dir), QuantSettings(mode=mode), allow_local_paths=True)
            part["load_s"] = round(time.perf_counter() - t0, 2)
            part["dtype"] = str(loaded.dtype).replace("torch.", "")
            list(stream_generate(loaded, PROMPT, GenerationSettings(max_new_tokens=4, do_sample=False), chat=False))  # warm-up
            runs = []
            for _ in range(repeats):
                last = list(stream_generate(loaded, PROMPT, settings, chat=False))[-1]
                runs.append({"ttft_s": round(last.ttft or 0.0, 4), "tokens_per_s": round(last.tokens_per_s, 1), "tokens": last.n_tokens,
                             "peak_gib": last.peak_gib})
            part["runs"] = runs
            part["ttft_s_min"] = min(r["ttft_s"] for r in runs)
            part["tokens_per_s_median"] = statistics.median(r["tokens_per_s"] for r in runs)
            del loaded
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def summary(r: dict[str, Any]) -> list[str]:
    lines = ["| weights | dtype | load s | TTFT s (min) | tokens/s (median) | tokens | peak GiB |", "|---|---|---|---|---|---|---|"]
    for label in ("16-bit", "8-bit", "4-bit"):
        x = r.get(label)
        if not isinstance(x, dict):
            continue
        if x.get("status") != "ok":
            lines.append(f"| {label} | {x.get('status')}: {str(x.get('error') or x.get('reason', ''))[:80]} |||||")
            continue
        last = x["runs"][-1] if x.get("runs") else {}
        lines.append(f"| {label} | {x.get('dtype')} | {x.get('load_s')} | {x.get('ttft_s_min')} | {x.get('tokens_per_s_median')} | "
                     f"{last.get('tokens')} | {last.get('peak_gib')} |")
    return lines
