"""The QLoRA path end to end on a CUDA GPU, with fp16 forced as on a Colab T4, and estimated vs measured peak memory.

Not a test: it needs a CUDA GPU (it says so and exits 2 without one), prints a markdown table and writes the numbers
as JSON (commit that file as data, and copy the table into docs/gpu.md).

    python bench/cuda_qlora.py [--shapes llama-3.2-1b,llama-3.2-3b] [--methods qlora,lora8] [--steps 300]
                               [--work DIR] [--out bench/results/cuda_qlora.json]

For every shape x method:
  model    a Llama-architecture model built from the catalog's Hub config (presets/models.yaml: the real 1B and 3B
           shapes) with random weights, saved as fp16 safetensors, with a byte-level tokenizer trained on the built-in
           corpus (the model keeps its 128,256-row embedding, so memory is that of the real model). Speed and memory do
           not depend on the weight values; the loss is only a sanity check (it must fall and stay finite).
  train    `python -m engine train` (the app's subprocess) with the TrainConfig defaults the form starts from, method
           qlora (4-bit nf4 base) or lora on an 8-bit base ("lora8"), precision fp16 (forced: the T4 case, AMP with a
           grad scaler), on builtin:dates, `--steps` optimizer steps, a checkpoint every steps/2.
  stop     a STOP file once checkpoint-(steps/2) is complete: the run saves and exits ("stopped").
  resume   `--resume --run-dir` (the run's own config) to the end: "done" with the adapter.
  merge    `python -m engine merge NAME` (the app's merge subprocess): the unquantized base + adapter, on the GPU when
           the estimator says it fits, else on the CPU (recorded).
  generate `python -m engine generate --model run:NAME/merged`: time to first token and tokens/s of 64 new tokens.

Recorded per row: useful tokens/s (median of the progress events after warm-up), step time, the estimator's predicted
peak (`memory` event, allocated) and the measured `torch.cuda.max_memory_allocated` peak (`done` event), their ratio,
final train and eval loss, merge seconds and device, TTFT and generation tokens/s. Each step runs in its own process,
so each peak belongs to that step alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

METHODS = {"qlora": {"method": "qlora", "quant": {"mode": "4bit"}}, "lora8": {"method": "lora", "quant": {"mode": "8bit"}}}


def build_model(shape: str, folder: Path) -> Path:
    """A random-weight model of the catalog entry `shape` in `folder` (reused when already there)."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from engine.config import TrainConfig
    from engine.data.build import train_records
    from engine.data.formats import record_texts
    from engine.estimator.catalog import catalog_lookup
    from engine.models.tokenizer import train_tokenizer

    entry = catalog_lookup(shape)
    if entry is None:
        raise SystemExit(f"{shape} is not in presets/models.yaml")
    data = dict(entry.config)
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    texts = record_texts(train_records(TrainConfig(dataset="builtin:corpus")))
    tokenizer = train_tokenizer(texts, vocab_size=4096)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
    return folder


def _env(runs: Path) -> dict[str, str]:
    env = dict(os.environ, COMPACT_LAB_RUNS=str(runs), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _events(run_dir: Path, name: str = "events.jsonl") -> list[dict[str, Any]]:
    from engine.runs import read_events

    return read_events(run_dir, name)


def train_stop_resume(model_dir: Path, method: str, steps: int, runs: Path, name: str) -> dict[str, Any]:
    """Train to half way, stop on a checkpoint, resume to the end; the events' numbers."""
    from engine.config import TrainConfig
    from engine.fields import from_dict, to_dict
    from engine.runs import last_complete_checkpoint

    run_dir = runs / name
    run_dir.mkdir(parents=True, exist_ok=True)
    half = max(1, steps // 2)
    values = {**to_dict(TrainConfig()), **METHODS[method], "base_model": str(model_dir), "dataset": "builtin:dates", "precision": "fp16",
              "max_steps": steps, "save_steps": half, "logging_steps": 10, "run_name": name}
    values["quant"] = {**to_dict(TrainConfig())["quant"], **METHODS[method]["quant"], "compute_dtype": "fp16"}
    cfg_path = run_dir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(to_dict(from_dict(TrainConfig, values))), encoding="utf-8")
    log = open(run_dir / "bench.log", "ab")  # noqa: SIM115 - kept open across the three processes
    cmd = [sys.executable, "-m", "engine", "train", "--config", str(cfg_path), "--run-dir", str(run_dir)]
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(runs), cwd=REPO)
    while proc.poll() is None:
        ckpt = last_complete_checkpoint(run_dir)
        if ckpt is not None and ckpt.name == f"checkpoint-{half}":
            (run_dir / "STOP").write_text("stop\n", encoding="utf-8")
            break
        time.sleep(1.0)
    proc.wait()
    first = _events(run_dir)
    stopped = first[-1]
    resume = subprocess.run([*cmd, "--resume"], stdout=log, stderr=subprocess.STDOUT, env=_env(runs), cwd=REPO)
    events = _events(run_dir)
    done = events[-1]
    if resume.returncode != 0 or done.get("type") != "done":
        return {"error": f"run ended with {done.get('type')}: {done.get('message', '')}", "stopped": stopped.get("type")}
    progress = [e for e in events if e["type"] == "progress" and e.get("step", 0) > 10]
    predicted = next((e for e in events if e["type"] == "memory"), {})
    losses = [e["loss"] for e in events if e["type"] == "progress" and e.get("loss") is not None]
    peak, pred = done.get("peak_gib"), predicted.get("predicted_gib")
    return {
        "stopped_at": stopped.get("step") if stopped.get("type") == "stopped" else None,
        "resumed_from": [e for e in events if e["type"] == "start"][-1].get("resumed_from"),
        "tokens_per_s": round(statistics.median(e["tokens_per_s"] for e in progress), 1) if progress else None,
        "seconds": round(time.time() - t0, 1),
        "first_loss": losses[0] if losses else None, "final_loss": done.get("final_loss"), "eval_loss": done.get("eval_loss"),
        "predicted_gib": pred, "predicted_total_gib": predicted.get("predicted_total_gib"), "peak_gib": peak,
        "predicted_over_measured": round(pred / peak, 3) if pred and peak else None,
    }


def merge_and_generate(runs: Path, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    merge = subprocess.run([sys.executable, "-m", "engine", "merge", name], capture_output=True, text=True, env=_env(runs), cwd=REPO)
    events = _events(runs / name, "merge_events.jsonl")
    last = events[-1] if events else {}
    out["merge"] = {"ok": merge.returncode == 0 and last.get("type") == "merge_done", "device": last.get("device"), "seconds": last.get("seconds"),
                    "peak_gib": last.get("peak_gib"), "reason": events[0].get("reason") if events else merge.stderr[-500:]}
    if not out["merge"]["ok"]:
        return out
    gen = subprocess.run([sys.executable, "-m", "engine", "generate", "--model", f"run:{name}/merged", "--prompt",
                          "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", "--max-new-tokens", "64",
                          "--no-do-sample"], capture_output=True, text=True, env=_env(runs), cwd=REPO)
    tail = gen.stderr.strip().splitlines()[-1] if gen.stderr.strip() else ""
    out["generate"] = {"ok": gen.returncode == 0, "stats": tail}  # "[64 tokens, X tok/s, first token Ys]"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="llama-3.2-1b,llama-3.2-3b")
    ap.add_argument("--methods", default="qlora,lora8")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--work", type=Path, default=Path("bench_cuda_work"), help="models and runs (several GB; not committed)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cuda_qlora.json")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("cuda_qlora: no CUDA GPU here; this benchmark only runs on one (see docs/gpu.md).", file=sys.stderr)
        return 2
    from engine.hardware.device import detect_device

    device = detect_device()
    runs = (args.work / "runs").resolve()
    rows = []
    for shape in args.shapes.split(","):
        model_dir = build_model(shape, (args.work / "models" / shape).resolve())
        for method in args.methods.split(","):
            name = f"cuda-{shape}-{method}".replace(".", "_")
            row = {"shape": shape, "method": method, **train_stop_resume(model_dir, method, args.steps, runs, name)}
            if "error" not in row:
                row.update(merge_and_generate(runs, name))
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"device": device.name, "capability": device.capability, "total_gib": round(device.total_gib, 2), "torch": torch.__version__,
              "steps": args.steps, "precision": "fp16 (forced, as on a T4)", "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"\n{device.name} (cc {device.capability}), fp16 forced, {args.steps} steps\n")
    print("| shape | method | tok/s | pred GiB | meas GiB | pred/meas | loss first→last | eval | merge | generate |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['shape']} | {r['method']} | {r['error']} |||||||")
            continue
        merge = r.get("merge", {})
        print(f"| {r['shape']} | {r['method']} | {r['tokens_per_s']} | {r['predicted_gib']} | {r['peak_gib']} | {r['predicted_over_measured']} | "
              f"{r['first_loss']}→{r['final_loss']} | {r['eval_loss']} | {merge.get('device')} {merge.get('seconds')} s | "
              f"{r.get('generate', {}).get('stats', '')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
