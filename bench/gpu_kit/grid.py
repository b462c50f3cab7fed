"""Section d, the estimator grid: measured peak memory over method x micro-batch x sequence x checkpointing, on the
Llama-3.2-1B shape (QLoRA 4-bit, LoRA on an 8-bit base, LoRA on a 16-bit base: 3 x 2 x 2 x 2 = 24 points) and the 3B
shape (QLoRA: 4 points), written as rows in the columns of bench/data/memory_calibration.csv, so they join the
estimator's data as a source of their own: `python bench/memory_accuracy.py --extra DIR/grid.csv` reports with and
without them.

One process per shape (its model loaded once per method). A point is one forward, backward and optimizer step on
`batch x seq` random tokens, prepared exactly as a run prepares the model (engine/training/adapters.py, the run's
optimizer from its TrainingArguments, autocast in the run's dtype); measured: `torch.cuda.max_memory_allocated` and
`max_memory_reserved` over that step, the peaks reset and the optimizer dropped between points. Beside each: the
estimator's prediction for the same TrainConfig (engine/estimator/handoff.py `query_from_train`, as the form asks).
The loss is transformers' own (`labels=`); the run's Trainer computes the loss on the scored positions only.

Dry run: two points of a tiny Llama on the CPU (the code path and the CSV, memory not measured).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import ROOT, Context, build_model, engine_env

TITLE = "estimator grid (calibration rows)"
CAP_S = 65
NEEDS_CUDA = False  # the dry run measures nothing but runs the code path on the CPU

METHODS = {"qlora": ("qlora", "4bit"), "lora8": ("lora", "8bit"), "lora16": ("lora", "none")}
GRID = {
    "llama-3.2-1b": [(m, b, s, c) for m in ("qlora", "lora8", "lora16") for b in (1, 4) for s in (512, 1024) for c in (True, False)],
    "llama-3.2-3b": [("qlora", b, 512, c) for b in (1, 4) for c in (True, False)],
}
DRY_GRID = {"tiny": [("lora16", 2, 64, False), ("lora16", 2, 64, True)]}
COLUMNS = ("source", "model", "params_b", "method", "weight_precision", "optimizer", "batch", "seq_len", "grad_ckpt", "gpu", "measured_gb", "notes")
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp32": "fp32"}


def run(ctx: Context) -> None:
    grid = DRY_GRID if ctx.dry_run else GRID
    points: list[dict[str, Any]] = []
    for shape, todo in grid.items():
        with ctx.part(f"shape_{shape}", min_left_s=15) as part:
            if part is None:
                continue
            model_dir = build_model(shape, ctx.work / "models" / shape, device="cpu" if ctx.dry_run else "cuda")
            rows_file = ctx.work / f"grid_{shape}.jsonl"
            rows_file.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "bench.gpu_kit.grid", "--shape", shape, "--model-dir", str(model_dir), "--points", json.dumps(todo),
                   "--rows", str(rows_file)]
            try:
                proc = subprocess.run(cmd, cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=max(5.0, ctx.left() - 3))
                part["returncode"], part["tail"] = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
            except subprocess.TimeoutExpired:
                part["timeout"] = True  # the points measured before it stay
            rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines()] if rows_file.exists() else []
            part["points"] = len(rows)
            points += rows
            ctx.record("points", points)
            write_csv(ctx.out / "grid.csv", points)


def predicted(cfg: Any, dtype: str, model: str) -> dict[str, Any]:
    """The estimator's allocated and reserved peak (GiB) for a TrainConfig (or its dict) run in `dtype`, as the form asks."""
    from bench.memory_accuracy import ours
    from engine.config import TrainConfig
    from engine.estimator.handoff import query_from_train
    from engine.fields import from_dict

    if isinstance(cfg, dict):
        cfg = from_dict(TrainConfig, cfg)
    query = query_from_train(cfg, DTYPES[dtype], model=model)
    return {"allocated_gib": round(ours(query, "alloc"), 3), "reserved_gib": round(ours(query, "reserved"), 3), "query": dataclasses.asdict(query)}


def measure_shape(shape: str, model_dir: Path, points: list[tuple[str, int, int, bool]], rows_file: Path) -> None:
    """In the shape's own process: every point, one JSON line each (appended as it is measured)."""
    import tempfile

    import torch
    from transformers import Trainer

    from engine.config import QuantSettings, TrainConfig
    from engine.hardware.device import detect_device, dtype_name, master_dtype, resolve_dtype
    from engine.models.loading import load_model
    from engine.runs import EventLog
    from engine.training.adapters import prepare_for_method
    from engine.training.trainer import training_args

    device = detect_device()
    cuda = device.kind == "cuda"
    by_method: dict[str, list[tuple[str, int, int, bool]]] = {}
    for p in points:
        by_method.setdefault(p[0], []).append(p)
    for key, todo in by_method.items():
        method, mode = METHODS[key]
        base = TrainConfig(method=method, base_model=str(model_dir), dataset="builtin:dates", quant=QuantSettings(mode=mode), grad_checkpointing=True)
        dtype = resolve_dtype(base.precision, device)
        loaded = load_model(str(model_dir), QuantSettings(mode=mode, compute_dtype=base.precision), allow_local_paths=True,
                            dtype=master_dtype(base.method, dtype, device), device=device)
        with tempfile.TemporaryDirectory() as tmp:
            model = prepare_for_method(base, loaded.model, EventLog(Path(tmp) / "events.jsonl"))
            model.train()
            for _, batch, seq, ckpt in todo:
                cfg = dataclasses.replace(base, micro_batch_size=batch, max_seq_len=seq, grad_checkpointing=ckpt)
                row = {"shape": shape, "method": key, "batch": batch, "seq": seq, "grad_ckpt": ckpt, "dtype": dtype_name(dtype), "device": device.name}
                try:
                    row.update(_step(model, cfg, device, dtype, Path(tmp), Trainer, training_args, loaded.model.config.vocab_size))
                except torch.OutOfMemoryError as exc:
                    row["oom"] = str(exc).splitlines()[0][:200]
                finally:
                    if cuda:
                        torch.cuda.empty_cache()
                row["predicted"] = predicted(cfg, dtype_name(dtype), str(model_dir / "config.json"))
                with open(rows_file, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
        del model, loaded
        if cuda:
            torch.cuda.empty_cache()


def _step(model: Any, cfg: Any, device: Any, dtype: Any, tmp: Path, trainer_cls: Any, training_args: Any, vocab: int) -> dict[str, Any]:
    import contextlib

    import torch

    cuda = device.kind == "cuda"
    if cfg.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    else:
        model.gradient_checkpointing_disable()
    args = training_args(cfg, tmp / "out", device, dtype, has_eval=False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt_cls, opt_kwargs = trainer_cls.get_optimizer_cls_and_kwargs(args, model)
    optimizer = opt_cls(params, **opt_kwargs)
    ids = torch.randint(0, vocab, (cfg.micro_batch_size, cfg.max_seq_len), device=device.torch_device)
    autocast = torch.autocast(device.torch_device.type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if cuda else 0
    t0 = time.perf_counter()
    with autocast:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    out = {"step_s": round(time.perf_counter() - t0, 3), "optimizer": type(optimizer).__name__, "loss": round(float(loss.detach()), 4)}
    if cuda:
        out.update(allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3), reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 3),
                   before_gib=round(before / 2**30, 3))
    del optimizer, loss, ids
    return out


def write_csv(path: Path, points: list[dict[str, Any]]) -> None:
    """The measured points as rows of bench/data/memory_calibration.csv's columns (GiB, metric in the notes, the
    estimator query last, after `query=`)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for p in points:
            if "allocated_gib" not in p:
                continue  # an OOM point or the CPU dry run: no measurement
            q = p["predicted"]["query"]
            wp = {"qlora": f"nf4{'+DQ' if q.get('double_quant') else ''} (compute {p['dtype']})", "lora8": f"int8 (compute {p['dtype']})",
                  "lora16": p["dtype"]}[p["method"]]
            writer.writerow({
                "source": f"compact-llm-lab bench/gpu_kit/grid.py on {p['device']} (random weights; {time.strftime('%Y-%m')})",
                "model": f"{p['shape']} (random weights)", "params_b": "", "method": f"{p['method']} r={q.get('lora_r')} on {q.get('lora_targets')}",
                "weight_precision": wp, "optimizer": p.get("optimizer", ""), "batch": p["batch"], "seq_len": p["seq"],
                "grad_ckpt": "yes" if p["grad_ckpt"] else "no", "gpu": p["device"], "measured_gb": p["allocated_gib"],
                "notes": f"unit=GiB; metric=torch.cuda.max_memory_allocated() over one forward+backward+optimizer step (reserved_gib="
                         f"{p['reserved_gib']}); predicted alloc {p['predicted']['allocated_gib']} reserved {p['predicted']['reserved_gib']}; "
                         f"query={json.dumps(q, separators=(',', ':'))}",
            })


def summary(r: dict[str, Any]) -> list[str]:
    points = r.get("points", [])
    lines = ["| shape | method | batch | seq | ckpt | alloc GiB | pred | reserved GiB | pred | step s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        pred = p.get("predicted", {})
        lines.append(f"| {p['shape']} | {p['method']} | {p['batch']} | {p['seq']} | {p['grad_ckpt']} | {p.get('allocated_gib', p.get('oom', '-'))} | "
                     f"{pred.get('allocated_gib')} | {p.get('reserved_gib', '-')} | {pred.get('reserved_gib')} | {p.get('step_s')} |")
    measured = [p for p in points if "allocated_gib" in p]
    if measured:
        errors = sorted(abs(p["predicted"]["allocated_gib"] - p["allocated_gib"]) / p["allocated_gib"] for p in measured)
        lines.append(f"\n{len(measured)} points measured; |pred - meas| / meas (allocated): median {errors[len(errors) // 2]:.1%}, max {errors[-1]:.1%}")
    return lines if points else ["- no point measured"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="one shape's grid points (called by the grid section)")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--points", required=True, help="JSON list of [method, batch, seq, grad_ckpt]")
    ap.add_argument("--rows", type=Path, required=True, help="JSON lines file the points are appended to")
    args = ap.parse_args(argv)
    measure_shape(args.shape, args.model_dir, [tuple(p) for p in json.loads(args.points)], args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
