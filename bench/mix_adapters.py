"""Mixing adapters, measured: a date-task LoRA run and an instruction-following LoRA run on the built-in model, mixed with
each method (linear, TIES, DARE-linear, DARE-TIES, SVD, cat), and every parent and mix scored on both tasks.

    COMPACT_LAB_RUNS=/tmp/mix-bench python bench/mix_adapters.py            # trains the parents once, then reuses them

Steps: (1) train the two parents with `python -m engine train` (skipped when they are finished already); (2) mix them with
`python -m engine mix` once per method, weights 1,1, density 0.5 (skipped when done); (3) load the base once with every
adapter and score each model on: the date task (exact-match accuracy on its 100 held-out dates, greedy), the loss of the
date answers on those 100 dates (answer tokens only: it moves before the accuracy does), and the loss of the answers on
the instruction run's held-out 10% (its own eval split). Prints a Markdown table (docs/evaluation.md, "Mixing adapters").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.config import QuantSettings, TrainConfig  # noqa: E402
from engine.data.build import build_train_data  # noqa: E402
from engine.data.files import SAMPLES_DIR  # noqa: E402
from engine.fields import field_specs  # noqa: E402
from engine.inference.tasks import date_items, evaluate_task  # noqa: E402
from engine.mix_config import MixConfig  # noqa: E402
from engine.models.loading import load_model  # noqa: E402
from engine.refs import default_runs_dir  # noqa: E402
from engine.runs import load_config, summarize  # noqa: E402

BASE = "builtin:compact-mini"
PARENTS = {
    "bench-dates": ["--dataset", "builtin:dates", "--learning-rate", "3e-3", "--max-steps", "90", "--max-seq-len", "72",
                    "--micro-batch-size", "16", "--lr-scheduler", "linear"],
    "bench-instr": ["--dataset", "builtin:instructions", "--learning-rate", "2e-3", "--max-steps", "40", "--max-seq-len", "128",
                    "--micro-batch-size", "8"],
}
METHODS = [c for c in field_specs(MixConfig) if c.name == "combination"][0].choices
WEIGHTS, DENSITY = "1,1", 0.5


def engine(*args: str) -> None:
    cmd = [sys.executable, "-m", "engine", *args]
    print("$ python -m engine", " ".join(args), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def finished(runs: Path, name: str) -> bool:
    return (runs / name / "config.yaml").exists() and summarize(runs / name, alive=False).state == "finished"


def answer_loss(model, examples: list[dict]) -> float:
    """Mean cross-entropy of the answer tokens (labels != -100) over `examples`, one example at a time."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex["input_ids"]])
            labels = torch.tensor([ex["labels"]])
            logits = model(input_ids=ids).logits[0, :-1].float()
            target = labels[0, 1:]
            keep = target != -100
            total += torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="sum").item()
            count += int(keep.sum())
    return total / max(count, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dates", type=int, default=100, help="held-out dates whose answer loss is measured (100: the whole test split)")
    parser.add_argument("--accuracy-dates", type=int, default=100, help="held-out dates answered for the exact-match accuracy (generation: slow)")
    parser.add_argument("--only", default="", help="score only these models (comma-separated names, base included), e.g. to split the work")
    args = parser.parse_args()
    runs = default_runs_dir()
    t0 = time.time()
    for name, flags in PARENTS.items():
        if not finished(runs, name):
            engine("train", "--method", "lora", "--base-model", BASE, "--run-name", name, *flags)
    mixes = [f"bench-mix-{m.replace('_', '-')}" for m in METHODS]
    for method, name in zip(METHODS, mixes, strict=True):
        if not finished(runs, name):
            engine("mix", "--parents", ",".join(PARENTS), "--combination", method, "--weights", WEIGHTS, "--density", str(DENSITY),
                   "--no-score", "--run-name", name)
    print(f"parents and mixes ready in {time.time() - t0:.0f} s", flush=True)

    loaded = load_model("run:bench-dates", QuantSettings(mode="none"), runs_dir=runs, allow_local_paths=True)
    model, tok = loaded.model, loaded.tokenizer
    adapters = {"bench-dates": "default"}
    for name in ["bench-instr", *mixes]:
        model.load_adapter(str(runs / name / "adapter"), adapter_name=name.replace("-", "_"), is_trainable=False)
        adapters[name] = name.replace("-", "_")
    model.eval()
    instr_cfg = load_config(runs / "bench-instr" / "config.yaml")
    instr_eval = build_train_data(instr_cfg, tok, instr_cfg.max_seq_len).evals
    dates_cfg = TrainConfig(method="lora", base_model=BASE, dataset=str(SAMPLES_DIR / "dates_test.jsonl"), eval_fraction=0.0, max_seq_len=72)
    date_test = build_train_data(dates_cfg, tok, 72).train[: args.dates]
    items = date_items("test", args.accuracy_dates)
    rows = []
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    for label, adapter in [("base", None), *adapters.items()]:
        if only and label not in only:
            continue
        t1 = time.time()
        if adapter is None:
            with model.disable_adapter():
                acc = evaluate_task(model, tok, items).accuracy
                dl, il = answer_loss(model, date_test), answer_loss(model, instr_eval)
        else:
            model.set_adapter(adapter)
            acc = evaluate_task(model, tok, items).accuracy
            dl, il = answer_loss(model, date_test), answer_loss(model, instr_eval)
        rows.append({"model": label, "date_accuracy": acc, "date_answer_loss": dl, "instruction_answer_loss": il})
        print(json.dumps(rows[-1]), f"({time.time() - t1:.0f} s)", flush=True)
    print(f"\n{len(items)} held-out dates answered, {len(date_test)} date answers and {len(instr_eval)} held-out instructions scored; weights {WEIGHTS}, density {DENSITY}; "
          f"{time.time() - t0:.0f} s in all on {loaded.device.name}\n")
    print(f"| model | date task (exact match, {len(items)} dates) | date answers, loss | held-out instructions, loss |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {100 * r['date_accuracy']:.0f}% | {r['date_answer_loss']:.3f} | {r['instruction_answer_loss']:.3f} |")


if __name__ == "__main__":
    main()
