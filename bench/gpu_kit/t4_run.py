"""Section c: T4 conditions on any CUDA card (`COMPACT_LAB_EMULATE_T4=1`, engine/hardware/t4.py), so the decisions a
Colab T4 user meets run on real CUDA: detection says compute capability 7.5, no bf16, 15 GiB, and every process is
capped at a T4's usable 14.7 GiB.

Parts, in order of value (each recorded as it ends):
  decisions     what detection reports; `auto` = fp16 for Llama, fp32 for Gemma-2; bf16 refused; the start-up line
  cap           the cap is real: 15 GiB cannot be allocated, 10 GiB can
  qlora         the Llama-3.2-1B shape with random weights (as bench/cuda_qlora.py builds it), QLoRA, the form's defaults
                with `precision=auto` (so fp16 with the grad scaler, decided by the emulated card), `python -m engine train`
                to half way, STOP, `--resume` to the end: loss scale in the progress events, scaler.pt in every checkpoint,
                predicted vs measured peak (allocated and reserved)
  qlora_merge   `python -m engine merge` (placement decided by what the cap leaves) and `python -m engine generate`
  lora8         the same training on an 8-bit base (LoRA)
  gemma         Gemma-2 under `auto`: the run's own precision decision (engine/training/preflight.py) says fp32
  oom           a run that cannot fit a T4 (1B LoRA, 16-bit base, micro-batch 32 x 1024 tokens of the built-in corpus, no
                checkpointing) ends as failed with kind `oom` and the page's "Retry after OOM" button
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .common import ROOT, Context, build_model, engine_env

TITLE = "T4 conditions (COMPACT_LAB_EMULATE_T4=1)"
CAP_S = 155
NEEDS_CUDA = True
SHAPE = "llama-3.2-1b"
STEPS = 24
# 1B LoRA, 16-bit base, no checkpointing, on the built-in corpus cut into full 1024-token rows (about 20 of them, so ~20k
# tokens in the micro-batch): the 128k-vocabulary logits alone need several times a T4's memory
OOM_BATCH, OOM_SEQ = 32, 1024
METHODS = {"qlora": {"method": "qlora", "quant": {"mode": "4bit"}}, "lora8": {"method": "lora", "quant": {"mode": "8bit"}}}


def run(ctx: Context) -> None:
    from engine.hardware.t4 import ENV_EMULATE_T4

    os.environ[ENV_EMULATE_T4] = "1"  # this process and every engine process it starts
    runs = ctx.work / "t4_runs"
    with ctx.part("decisions") as part:
        part.update(decisions())
    with ctx.part("cap") as part:
        part.update(cap_is_real())
    with ctx.part("model") as part:
        model_dir = build_model(SHAPE, ctx.work / "models" / SHAPE)
        part["path"] = str(model_dir)
    with ctx.part("qlora", min_left_s=50) as part:
        if part is not None:
            part.update(train_stop_resume(model_dir, "qlora", runs, "t4-qlora", ctx))
    with ctx.part("qlora_merge", min_left_s=30) as part:
        if part is not None:
            part.update(merge_and_generate(runs, "t4-qlora", ctx))
    with ctx.part("lora8", min_left_s=50) as part:
        if part is not None:
            part.update(train_stop_resume(model_dir, "lora8", runs, "t4-lora8", ctx))
    with ctx.part("gemma") as part:
        part.update(gemma_precision(ctx.work / "models" / "gemma2-config", runs))
    with ctx.part("oom", min_left_s=25) as part:
        if part is not None:
            part.update(oom_run(model_dir, runs, ctx))


def decisions() -> dict[str, Any]:
    import torch

    from engine.errors import ConfigError
    from engine.hardware.device import detect_device, dtype_name, precision_reason, resolve_dtype
    from engine.hardware.startup import device_lines
    from engine.hardware.t4 import memory_fraction

    device = detect_device()
    try:
        resolve_dtype("bf16", device, model_type="llama")
        bf16 = "accepted (wrong on a T4)"
    except ConfigError as exc:
        bf16 = f"refused: {exc}"
    total = torch.cuda.get_device_properties(0).total_memory
    return {"device": device.name, "capability": device.capability, "bf16": device.bf16, "total_gib": device.total_gib,
            "memory_fraction": round(memory_fraction(total), 4), "cap_gib": round(memory_fraction(total) * total / 2**30, 2),
            "auto_llama": dtype_name(resolve_dtype("auto", device, model_type="llama")),
            "auto_gemma2": dtype_name(resolve_dtype("auto", device, model_type="gemma2")), "bf16_choice": bf16,
            "reason_llama": precision_reason(device, "llama", "en"), "startup": device_lines(device, lang="en")}


def cap_is_real() -> dict[str, Any]:
    import torch

    from engine.hardware.device import detect_device

    detect_device()  # sets the cap in this process
    out: dict[str, Any] = {}
    for gib in (15, 10):
        try:
            x = torch.empty(gib * 2**30, dtype=torch.uint8, device="cuda")
            out[f"alloc_{gib}_gib"] = "ok"
            del x
        except torch.OutOfMemoryError as exc:
            out[f"alloc_{gib}_gib"] = f"OutOfMemoryError: {str(exc).splitlines()[0][:200]}"
        torch.cuda.empty_cache()
    out["as_a_t4"] = out["alloc_15_gib"].startswith("OutOfMemoryError") and out["alloc_10_gib"] == "ok"
    return out


def _events(run_dir: Path, name: str = "events.jsonl") -> list[dict[str, Any]]:
    from engine.runs import read_events

    return read_events(run_dir, name)


def _config(model_dir: Path, key: str, name: str, **extra: Any) -> dict[str, Any]:
    """The form's defaults for `key` (METHODS) on the model, `precision=auto`, STEPS steps, checkpoint half way; `extra`
    overrides any field (method and quant included)."""
    from engine.config import TrainConfig
    from engine.fields import from_dict, to_dict

    base = to_dict(TrainConfig())
    values = {**base, **METHODS.get(key, {}), "base_model": str(model_dir), "dataset": "builtin:dates", "precision": "auto",
              "max_steps": STEPS, "save_steps": STEPS // 2, "logging_steps": 4, "run_name": name, "sample_generations": False, **extra}
    values["quant"] = {**base["quant"], **METHODS.get(key, {}).get("quant", {}), **extra.get("quant", {})}
    return to_dict(from_dict(TrainConfig, values))


def train_stop_resume(model_dir: Path, method: str, runs: Path, name: str, ctx: Context) -> dict[str, Any]:
    """`python -m engine train` to half way, STOP once that checkpoint is complete, `--resume` to the end."""
    from engine.runs import checkpoints, last_complete_checkpoint

    run_dir = runs / name
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(model_dir, method, name)), encoding="utf-8")
    cmd = [sys.executable, "-m", "engine", "train", "--config", str(cfg_path), "--run-dir", str(run_dir)]
    half = STEPS // 2
    t0 = time.time()
    with open(run_dir / "bench.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=engine_env(runs), cwd=ROOT)
        while proc.poll() is None:
            ckpt = last_complete_checkpoint(run_dir)
            if ckpt is not None and ckpt.name == f"checkpoint-{half}":
                (run_dir / "STOP").write_text("stop\n", encoding="utf-8")
                break
            time.sleep(0.5)
        proc.wait(timeout=max(5.0, ctx.left()))
        first = _events(run_dir)
        resume = subprocess.run([*cmd, "--resume"], stdout=log, stderr=subprocess.STDOUT, env=engine_env(runs), cwd=ROOT,
                                timeout=max(5.0, ctx.left() - 2))
    events = _events(run_dir)
    done, start = events[-1], next((e for e in events if e["type"] == "start"), {})
    progress = [e for e in events if e["type"] == "progress"]
    out: dict[str, Any] = {
        "first_ended": first[-1].get("type") if first else None, "stopped_at": first[-1].get("step") if first else None,
        "ended": done.get("type"), "message": done.get("message"), "seconds": round(time.time() - t0, 1),
        "dtype": start.get("dtype"), "precision": start.get("precision_note"),
        "resumed_from": [e for e in events if e["type"] == "start"][-1].get("resumed_from"),
        "loss_scale": [e.get("loss_scale") for e in progress], "skipped_steps": progress[-1].get("skipped_steps") if progress else None,
        "losses": [round(e["loss"], 4) for e in progress if e.get("loss") is not None],
        "tokens_per_s": round(statistics.median(e["tokens_per_s"] for e in progress), 1) if progress else None,
        "scaler_in_every_checkpoint": all((p / "scaler.pt").exists() for _, p in checkpoints(run_dir)) if checkpoints(run_dir) else None,
    }
    if resume.returncode != 0 or done.get("type") != "done":
        out["log_tail"] = (run_dir / "bench.log").read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"{name} ended with {done.get('type')}: {done.get('message', '')}"[:500])
    memory = next((e for e in events if e["type"] == "memory"), {})
    out.update(predicted_gib=memory.get("predicted_gib"), predicted_total_gib=memory.get("predicted_total_gib"),
               peak_gib=done.get("peak_gib"), peak_reserved_gib=done.get("peak_reserved_gib"))
    try:
        from .grid import predicted

        cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
        out["predicted"] = predicted(cfg, out["dtype"], str(model_dir / "config.json"))
    except Exception as exc:  # the run's own prediction above still stands
        out["predicted"] = f"{type(exc).__name__}: {exc}"
    if out["predicted_gib"] and out["peak_gib"]:
        out["predicted_over_measured"] = round(out["predicted_gib"] / out["peak_gib"], 3)
    return out


def merge_and_generate(runs: Path, name: str, ctx: Context) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t0 = time.time()
    merge = subprocess.run([sys.executable, "-m", "engine", "merge", name], capture_output=True, text=True, env=engine_env(runs), cwd=ROOT,
                           timeout=max(5.0, ctx.left() - 15))
    events = _events(runs / name, "merge_events.jsonl")
    last = events[-1] if events else {}
    out["merge"] = {"ok": merge.returncode == 0 and last.get("type") == "merge_done", "device": last.get("device"),
                    "seconds": round(time.time() - t0, 1), "peak_gib": last.get("peak_gib"), "plan": events[0] if events else None,
                    "stderr": merge.stderr[-800:] if merge.returncode else ""}
    if not out["merge"]["ok"]:
        raise RuntimeError(f"merge failed: {merge.stderr[-400:]}")
    gen = subprocess.run([sys.executable, "-m", "engine", "generate", "--model", f"run:{name}/merged", "--prompt",
                          "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", "--max-new-tokens", "32", "--no-do-sample"],
                         capture_output=True, text=True, env=engine_env(runs), cwd=ROOT, timeout=max(5.0, ctx.left() - 2))
    out["generate"] = {"ok": gen.returncode == 0, "stats": (gen.stderr.strip().splitlines() or [""])[-1]}
    return out


def gemma_precision(folder: Path, runs: Path) -> dict[str, Any]:
    """The run's own precision decision for a Gemma-2 base (its config.json alone: no weights needed to decide)."""
    from engine.config import TrainConfig
    from engine.hardware.device import dtype_name
    from engine.training.preflight import check_before_start

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"]}), encoding="utf-8")
    decided = check_before_start(TrainConfig(method="qlora", base_model=str(folder), dataset="builtin:dates"), runs)
    return {"dtype": dtype_name(decided.dtype), "model_type": decided.model_type, "fp32_as_on_a_t4": decided.dtype.itemsize == 4}


def oom_run(model_dir: Path, runs: Path, ctx: Context) -> dict[str, Any]:
    from engine.training.jobs import JobManager
    from engine.views.run_view import run_buttons

    name = "t4-oom"
    run_dir = runs / name
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = _config(model_dir, "lora16", name, method="lora", quant={"mode": "none"}, micro_batch_size=OOM_BATCH, max_seq_len=OOM_SEQ,
                  grad_checkpointing=False, packing=False, max_steps=2, dataset="builtin:corpus", eval_fraction=0.0)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine", "train", "--config", str(run_dir / "config.yaml"), "--run-dir", str(run_dir)],
                          capture_output=True, text=True, env=engine_env(runs), cwd=ROOT, timeout=max(5.0, ctx.left() - 2))
    events = _events(run_dir)
    last = events[-1] if events else {}
    jobs = JobManager(runs)
    status = jobs.status(name)
    memory = next((e for e in events if e["type"] == "memory"), {})
    return {"returncode": proc.returncode, "ended": last.get("type"), "kind": last.get("kind"), "message": last.get("message"),
            "predicted_gib": memory.get("predicted_gib"), "error_kind": status.error_kind, "state": status.state,
            "retry_offered": run_buttons(jobs, name)[2],  # the page's "Retry after OOM" button
            "as_on_a_t4": last.get("kind") == "oom"}


def summary(r: dict[str, Any]) -> list[str]:
    d = r.get("decisions", {})
    lines = [f"- detection: {d.get('device')}, cc {d.get('capability')}, bf16 {d.get('bf16')}, {d.get('total_gib')} GiB, "
             f"cap {d.get('cap_gib')} GiB; auto: Llama {d.get('auto_llama')}, Gemma-2 {d.get('auto_gemma2')}",
             f"- cap: 15 GiB {r.get('cap', {}).get('alloc_15_gib', '?')[:60]}; 10 GiB {r.get('cap', {}).get('alloc_10_gib', '?')[:60]}"]
    lines += ["", "| run | ended | dtype | loss scale (first→last) | scaler.pt | tok/s | pred GiB | peak alloc | peak reserved | pred/meas |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for key in ("qlora", "lora8"):
        x = r.get(key, {})
        if not x:
            continue
        scale = [s for s in x.get("loss_scale", []) if s] or ["?"]
        lines.append(f"| {key} | {x.get('ended') or x.get('status')} | {x.get('dtype')} | {scale[0]}→{scale[-1]} | {x.get('scaler_in_every_checkpoint')} | "
                     f"{x.get('tokens_per_s')} | {x.get('predicted_gib')} | {x.get('peak_gib')} | {x.get('peak_reserved_gib')} | "
                     f"{x.get('predicted_over_measured')} |")
    m = r.get("qlora_merge", {})
    if m:
        lines.append(f"\n- merge: {m.get('merge', {}).get('device')} in {m.get('merge', {}).get('seconds')} s; generate: "
                     f"{m.get('generate', {}).get('stats') or m.get('error')}")
    lines.append(f"- Gemma-2 under auto: {r.get('gemma', {}).get('dtype')}")
    o = r.get("oom", {})
    lines.append(f"- OOM run: {o.get('ended')} kind {o.get('kind')} (predicted {o.get('predicted_gib')} GiB); retry offered: {o.get('retry_offered')}")
    return lines
