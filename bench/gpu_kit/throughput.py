"""Section e, training throughput on CUDA: bench/train_throughput.py's recipes on the Llama-3.2-1B shape (random
weights, LoRA on builtin:instructions as its `llama-lora` suite, 256 tokens, micro-batch 8): the library recipe (dynamic
padding, fp32 as the Trainer picks it) against ours (the app's defaults: packing, `auto` precision), then our chunked
loss and Liger's kernels (`use_liger_kernel`, when the kit carried liger-kernel), each in its own process.

Per recipe: useful tokens/s, MFU and the peak allocated memory during `trainer.train()`. MFU = useful tokens/s x
training FLOPs per token / the card's peak dense FLOP/s for the recipe's dtype (presets/gpu_peaks.yaml; the fp32
figure for fp32 recipes, since torch leaves TF32 off for matmuls by default). Training FLOPs per token = k x the parameters of every matrix multiply
(the linear layers and the output head, not the embedding lookup): k = 6 when the weights train (forward 2, backward
4), 4 for LoRA on a frozen base (no weight gradients; the adapters' own FLOPs are under 1%); attention's s^2 term is
left out (about 2% at 256 tokens). A candidate is adopted only where it wins end to end (docs/performance.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .common import ROOT, Context, build_model, engine_env

TITLE = "training throughput on CUDA (tokens/s, MFU, peak)"
CAP_S = 60
NEEDS_CUDA = True
SHAPE = "llama-3.2-1b"
PEAKS_FILE = ROOT / "presets" / "gpu_peaks.yaml"
RECIPES = ("library", "ours", "ours-chunked", "ours-liger")


def card_peak_tflops(card: str, dtype: str) -> float | None:
    """The card's dense peak (TFLOP/s) for `dtype` (bf16, fp16, fp32), None when unknown. fp32 is the CUDA-core figure:
    torch leaves TF32 off for matmuls unless asked (`torch.backends.cuda.matmul.allow_tf32`), and so does the Trainer."""
    data = yaml.safe_load(PEAKS_FILE.read_text(encoding="utf-8"))
    for entry in data["cards"]:
        if all(m in card for m in entry["match"]):
            return entry["tflops"].get(dtype)
    return None


def matmul_params(model_dir: Path) -> int:
    """Parameters of every linear layer and the output head (tied or not), counted on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def mfu(tok_s: float, params: int, method: str, card: str, dtype: str) -> float | None:
    peak = card_peak_tflops(card, dtype)
    if not peak:
        return None
    k = 6 if method in ("full", "scratch") else 4
    return round(tok_s * k * params / (peak * 1e12), 4)


def run(ctx: Context) -> None:
    model_dir = build_model(SHAPE, ctx.work / "models" / SHAPE)
    params = matmul_params(model_dir)
    ctx.record("shape", {"model": SHAPE, "matmul_params": params, "flops_per_token_lora": 4 * params})
    try:
        import liger_kernel  # noqa: F401

        recipes = RECIPES
    except ImportError:
        recipes = RECIPES[:-1]
        ctx.record("liger", "not measured: liger-kernel is not installed (the kit carries it unless --no-optional)")
    spec = {"model": "tiny-llama", "method": "lora", "dataset": "builtin:instructions", "micro_batch": 8, "grad_accum": 1, "max_seq_len": 256,
            "lr": 2e-3, "epochs": 2.0, "seed": 42, "threads": 0, "measure": "speed", "path": str(model_dir)}
    for recipe in recipes:
        with ctx.part(recipe, min_left_s=15) as part:
            if part is None:
                continue
            proc = subprocess.run([sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--worker", recipe, "--spec", json.dumps(spec)],
                                  cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=max(5.0, ctx.left() - 2))
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                part["tail"] = proc.stderr[-2000:]
                raise RuntimeError(f"{recipe}: exit {proc.returncode}")
            result = json.loads(lines[-1][len("RESULT "):])
            part.update({k: result.get(k) for k in ("dtype", "device", "tok_s", "seconds", "steps", "useful_tokens", "train_peak_mib", "eval_after")})
            part["mfu"] = mfu(result["tok_s"], params, "lora", result["device"], result["dtype"])


def summary(r: dict[str, Any]) -> list[str]:
    lines = ["| recipe | dtype | tokens/s | MFU | peak MiB | eval loss | steps |", "|---|---|---|---|---|---|---|"]
    base = r.get("library", {}).get("tok_s")
    for recipe in RECIPES:
        x = r.get(recipe)
        if not isinstance(x, dict):
            continue
        if x.get("status") != "ok":
            lines.append(f"| {recipe} | {x.get('status')}: {str(x.get('error') or x.get('reason', ''))[:80]} ||||||")
            continue
        speed = f"{x['tok_s']:,.0f}" + (f" ({x['tok_s'] / base:.2f}x)" if base and recipe != "library" else "")
        mfu_text = f"{x['mfu']:.1%}" if x.get("mfu") is not None else "?"
        lines.append(f"| {recipe} | {x.get('dtype')} | {speed} | {mfu_text} | {x.get('train_peak_mib', 0):,.0f} | "
                     f"{x.get('eval_after') if x.get('eval_after') is None else round(x['eval_after'], 4)} | {x.get('steps')} |")
    if isinstance(r.get("liger"), str):
        lines.append(f"\n- Liger: {r['liger']}")
    return lines
