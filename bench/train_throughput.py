"""Training throughput: our default recipe (packing) against the course's plain recipe, same model/data/hardware.

Not a test: it prints a markdown table and PASS/FAIL against the targets of the packing issue:

    useful (non-padding) tokens/s  >= 1.5x the plain recipe
    peak memory                    <= 1.0x the plain recipe
    eval loss after the same useful tokens within +-5%

    python bench/train_throughput.py [--quick] [--model MODEL] [--method full|lora|qlora] [--repeats N] [--json OUT]

Recipes (both transformers `Trainer`, same model init, data, seed, learning rate, schedule and epochs):
  plain  every sample padded to max_seq_len (`DataCollatorForSeq2Seq(padding="max_length")`), batch 1,
         gradient accumulation 8, shuffled, no packing: the course's recipe.
  ours   packing (engine/data/packing.py: first-fit decreasing rows of max_seq_len, per-sample position ids, no
         cross-contamination) with 1 row per micro-batch (the same tokens per forward pass as plain, so the
         same activation memory) and the accumulation chosen so that an optimizer step sees about the same
         number of useful tokens as plain's 8 samples.
Both see every training sample the same number of times (epochs), so they train on exactly the same useful
tokens; the eval loss is then computed by one function for both (each held-out sample alone, token-weighted
cross-entropy, no padding), so it does not depend on either collator.

Models: random:compact-mini (default with --quick: the preset's architecture with random weights and a
tokenizer trained on the built-in corpus, full fine-tuning; no pretraining needed), builtin:compact-mini (the
pretrained built-in, pretrained into --runs first if missing, ~3 min; LoRA by default), tiny-llama (a
randomly initialized Llama-architecture model built from a small config; `--method qlora` (the CUDA default)
loads it in 4-bit through engine.models.loading like a real QLoRA run; on the CPU here, 1 epoch: 3.0x tok/s, 0.99x
memory, eval loss +0.3%). On CUDA the same code runs on the GPU in bf16/fp16.

Measurement: each recipe runs in its own subprocess (plain and ours alternate, `--repeats` times), because
a process's peak RSS cannot be reset. Peak memory: on CUDA `torch.cuda.max_memory_allocated` during
`trainer.train()`; on CPU the peak resident set size sampled every 2 ms during `trainer.train()` minus the
RSS just before it ("train peak": activations, gradients, optimizer state, allocator growth), with glibc told
to return freed blocks >= 64 KiB at once (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_) so that RSS follows
the live tensors rather than the heap's high-water mark, and the process's lifetime peak RSS (dominated by the
~0.5 GB of Python + torch both recipes share).

Measured on the shared 2-core CPU (Xeon, fp32, 1 thread, other jobs running), medians of 2 runs each:
  --quick (random compact-mini, full FT, 2 epochs): plain 346 vs ours 1,665 useful tok/s (4.8x); train peak RSS
      52.1 vs 51.9 MiB (1.00x); eval loss 6.426 vs 6.486 (+0.9%), both after 17,950 useful tokens.
  default (pretrained compact-mini, LoRA r16, 3 epochs), twice: 4.8x and 5.7x tok/s; train peak RSS 1.02x and
      0.97x (28.5-29.3 MiB: +-0.5 MiB between identical runs; one forward+backward of a packed and a padded row
      measured alone differ by < 0.1 MiB); eval loss 5.695 vs 5.788 (+1.6%) after 26,925 useful tokens.

CPU threads: torch runs with 1 thread by default here (`--threads`). On this shared 2-core machine under load
a 2-thread OpenMP team stalls at its barriers: a compact-mini forward+backward of 256 tokens took ~5 s with 2
threads and ~0.1 s with 1 (measured while writing this). Both recipes get the same setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TARGET_SPEEDUP, TARGET_MEMORY, TARGET_LOSS = 1.5, 1.0, 0.05
PLAIN_BATCH, PLAIN_ACCUM = 1, 8


# --------------------------------------------------------------------------------------------------
# Worker: one recipe in this process
# --------------------------------------------------------------------------------------------------


class _RssPeak:
    """Peak resident set size of this process, sampled in a thread (CPU: ru_maxrss cannot be reset)."""

    def __init__(self, every_s: float = 0.002) -> None:
        self.every_s, self.peak, self._stop = every_s, 0, threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def __enter__(self) -> _RssPeak:
        self.start = self.peak = self.rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, self.rss())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def _tokenizer() -> Any:
    from engine.data.formats import load_records, record_texts
    from engine.models.tokenizer import train_tokenizer

    return train_tokenizer(record_texts(load_records("builtin:corpus")), vocab_size=2048)


def _model(spec: dict[str, Any], device: Any, dtype: Any) -> tuple[Any, Any]:
    """(model ready for training, tokenizer) for spec["model"] / spec["method"], identical in both recipes."""
    import torch

    from engine.config import LoraSettings, QuantSettings
    from engine.training.adapters import apply_lora

    name, method = spec["model"], spec["method"]
    if name == "random:compact-mini":
        from engine.models.compact import CompactForCausalLM, load_compact_preset

        tokenizer = _tokenizer()
        config = load_compact_preset("compact-mini")
        config.vocab_size, config.pad_token_id, config.eos_token_id = len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id
        torch.manual_seed(spec["seed"])
        model = CompactForCausalLM(config).to(device.torch_device, dtype=dtype if method == "lora" else torch.float32)
    else:  # a folder: the pretrained built-in or the saved tiny Llama (parent prepared it)
        from engine.models.loading import load_model

        quant = QuantSettings(mode="4bit") if method == "qlora" else QuantSettings(mode="none")
        loaded = load_model(spec["path"], quant, allow_local_paths=True, dtype=dtype if method != "full" else torch.float32, device=device)
        model, tokenizer = loaded.model, loaded.tokenizer
    if method == "qlora":
        from peft import prepare_model_for_kbit_training

        from engine.models.bnb_safety import prepare_for_training

        prepare_for_training(model)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if method in ("lora", "qlora"):
        torch.manual_seed(spec["seed"])
        model = apply_lora(model, LoraSettings(r=16, alpha=32, dropout=0.0))
    tokenizer.padding_side = "right"
    return model, tokenizer


def _data(tokenizer: Any, max_len: int, seed: int) -> tuple[list, list]:
    from engine.config import TrainConfig
    from engine.data.build import build_train_data

    # the run's own data step: prompt masking, long rows truncated, 10% held out; no packing or curriculum here
    data = build_train_data(TrainConfig(dataset="builtin:instructions", eval_fraction=0.1, seed=seed), tokenizer, max_len)
    return data.train, data.evals


def eval_loss(model: Any, examples: list[dict[str, list[int]]], device: Any) -> float:
    """Token-weighted cross-entropy over the held-out samples, each run alone (no padding, no packing)."""
    import torch

    from engine.data.tokenize import IGNORE_INDEX

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex["input_ids"]], device=device.torch_device)
            labels = torch.tensor([ex["labels"]], device=device.torch_device)
            n = sum(x != IGNORE_INDEX for x in ex["labels"][1:])
            total += model(input_ids=ids, labels=labels, use_cache=False).loss.float().item() * n
            count += n
    model.train()
    return total / count


def run_worker(recipe: str, spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from engine.data.packing import PackingCollator, pack_examples
    from engine.hardware.device import detect_device, resolve_dtype

    device = detect_device()
    if device.kind == "cpu" and spec["threads"] > 0:
        torch.set_num_threads(spec["threads"])
    dtype = resolve_dtype("auto", device)
    model, tokenizer = _model(spec, device, dtype)
    max_len = spec["max_seq_len"]
    train, evals = _data(tokenizer, max_len, spec["seed"])
    useful_per_epoch = sum(len(e["input_ids"]) for e in train)
    if recipe == "plain":
        dataset = train
        collator = DataCollatorForSeq2Seq(tokenizer, padding="max_length", max_length=max_len, label_pad_token_id=-100)
        batch, accum, rows = PLAIN_BATCH, PLAIN_ACCUM, len(train)
    else:
        dataset, rep = pack_examples(train, max_len)
        collator = PackingCollator(tokenizer, pad_to_multiple_of=8)
        # the same useful tokens per optimizer step as plain's 8 samples (rounded to whole rows)
        per_row = useful_per_epoch / rep.rows
        batch, accum, rows = 1, max(1, round(PLAIN_ACCUM * PLAIN_BATCH * (useful_per_epoch / len(train)) / per_row)), rep.rows
    on_cpu = device.kind == "cpu"
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, gradient_accumulation_steps=accum, num_train_epochs=spec["epochs"],
            learning_rate=spec["lr"], lr_scheduler_type="cosine", warmup_steps=0.05, weight_decay=0.0, max_grad_norm=1.0,
            optim="adamw_torch_fused" if not on_cpu else "adamw_torch", bf16=dtype == torch.bfloat16 and not on_cpu,
            fp16=dtype == torch.float16, use_cpu=on_cpu, save_strategy="no", eval_strategy="no", logging_strategy="no",
            seed=spec["seed"], data_seed=spec["seed"], report_to="none", include_num_input_tokens_seen="non_padding",
            remove_unused_columns=False, dataloader_num_workers=0, disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator, processing_class=tokenizer)
        loss_before = eval_loss(model, evals, device)
        if device.kind == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base_alloc = torch.cuda.memory_allocated()
        with _RssPeak() as rss:
            t0 = time.perf_counter()
            trainer.train()
            if device.kind == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        peak = (torch.cuda.max_memory_allocated() - base_alloc) if device.kind == "cuda" else rss.peak - rss.start
        useful = trainer.state.num_input_tokens_seen
        loss_after = eval_loss(model, evals, device)
    import resource

    return {
        "recipe": recipe, "device": device.name, "device_kind": device.kind, "dtype": str(dtype).replace("torch.", ""), "rows": rows, "samples": len(train),
        "micro_batch": batch, "grad_accum": accum, "steps": trainer.state.global_step, "seconds": seconds,
        "useful_tokens": useful, "expected_useful": useful_per_epoch * spec["epochs"], "slots": rows * max_len * spec["epochs"] if recipe == "plain" else None,
        "tok_s": useful / seconds, "train_peak_mib": peak / 2**20, "process_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "eval_before": loss_before, "eval_after": loss_after,
    }


# --------------------------------------------------------------------------------------------------
# Parent: prepare the model once, run the recipes in subprocesses, print the table
# --------------------------------------------------------------------------------------------------


def _prepare(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    spec = {"model": args.model, "method": args.method, "seed": args.seed, "max_seq_len": args.max_seq_len, "epochs": args.epochs,
            "lr": args.lr, "threads": args.threads}
    if args.model == "builtin:compact-mini":
        from engine.refs import default_runs_dir
        from engine.training.builtin import ensure_builtin
        from engine.training.run import run_training

        runs = Path(args.runs) if args.runs else default_runs_dir()
        print(f"built-in compact-mini from {runs} (pretrained there first if missing)", flush=True)
        spec["path"] = str(ensure_builtin("compact-mini", runs, pretrain=run_training))
    elif args.model == "tiny-llama":
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        tokenizer = _tokenizer()
        torch.manual_seed(args.seed)
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=1024, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True)
        path = tmp / "tiny-llama"
        LlamaForCausalLM(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        spec["path"] = str(path)
    return spec


def _run(recipe: str, spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    if spec["threads"]:
        env.setdefault("OMP_NUM_THREADS", str(spec["threads"]))
    # glibc keeps freed memory in its heap (RSS = a high-water mark that depends on the order of allocations, +-2 MiB
    # between identical runs here); serving allocations >= 64 KiB with mmap and trimming returns them at once, so
    # the sampled RSS follows the live tensors (+-0.4 MiB). Same setting for both recipes.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    env.setdefault("MALLOC_TRIM_THRESHOLD_", "65536")
    proc = subprocess.run([sys.executable, __file__, "--worker", recipe, "--spec", json.dumps(spec)], capture_output=True, text=True, env=env,
                          cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{recipe} worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _table(results: list[dict[str, Any]], spec: dict[str, Any]) -> tuple[str, bool]:
    by = {r: [x for x in results if x["recipe"] == r] for r in ("plain", "ours")}
    med = {r: {k: statistics.median(x[k] for x in v) for k in ("tok_s", "train_peak_mib", "process_peak_rss_mib", "eval_after", "eval_before", "seconds")}
           for r, v in by.items()}
    p, o = by["plain"][0], by["ours"][0]
    unit = "MiB, GPU allocated" if p["device_kind"] == "cuda" else "MiB, RSS growth"
    lines = [
        f"Model {spec['model']} ({spec['method']}), builtin:instructions ({p['samples']} train samples), max_seq_len {spec['max_seq_len']}, "
        f"{spec['epochs']} epochs, lr {spec['lr']}, device {p['device']} ({p['dtype']}), threads {spec['threads']}, "
        f"{len(by['plain'])} run(s) each, medians.",
        "",
        "| recipe | rows x micro-batch x accum | optimizer steps | useful tokens | train s | useful tok/s | train peak "
        f"({unit}) | process peak RSS MiB | eval loss before -> after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in (("plain (pad to max, batch 1, accum 8)", p), ("ours (packing, 1 row, matched accum)", o)):
        m = med[r["recipe"]]
        lines.append(f"| {name} | {r['rows']} x {r['micro_batch']} x {r['grad_accum']} | {r['steps']} | {r['useful_tokens']:,} | {m['seconds']:.1f} | "
                     f"{m['tok_s']:,.0f} | {m['train_peak_mib']:.1f} | {m['process_peak_rss_mib']:.0f} | {m['eval_before']:.4f} -> {m['eval_after']:.4f} |")
    speed = med["ours"]["tok_s"] / med["plain"]["tok_s"]
    mem = med["ours"]["train_peak_mib"] / med["plain"]["train_peak_mib"] if med["plain"]["train_peak_mib"] > 0 else float("nan")
    loss = med["ours"]["eval_after"] / med["plain"]["eval_after"] - 1
    same_tokens = p["useful_tokens"] == o["useful_tokens"]
    checks = [
        (f"useful tokens/s {speed:.2f}x (target >= {TARGET_SPEEDUP}x)", speed >= TARGET_SPEEDUP),
        (f"peak memory {mem:.2f}x (target <= {TARGET_MEMORY}x; process peak RSS {med['ours']['process_peak_rss_mib'] / med['plain']['process_peak_rss_mib']:.2f}x)",
         mem <= TARGET_MEMORY),
        (f"eval loss after the same useful tokens {loss:+.1%} (target within +-{TARGET_LOSS:.0%}; same tokens: {same_tokens})",
         abs(loss) <= TARGET_LOSS and same_tokens),
    ]
    lines.append("")
    lines += [f"- {'PASS' if ok else 'FAIL'}: {text}" for text, ok in checks]
    if len(by["plain"]) > 1:
        lines.append("- per run tok/s: plain " + ", ".join(f"{x['tok_s']:.0f}" for x in by["plain"]) + "; ours " + ", ".join(f"{x['tok_s']:.0f}" for x in by["ours"]))
    return "\n".join(lines), all(ok for _, ok in checks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="random compact-mini, full fine-tuning, 2 epochs, 1 run each (< 3 min on 2 CPU cores)")
    ap.add_argument("--model", default=None, help="random:compact-mini | builtin:compact-mini | tiny-llama")
    ap.add_argument("--method", default=None, choices=["full", "lora", "qlora"])
    ap.add_argument("--epochs", type=float, default=None)
    ap.add_argument("--max-seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch's default)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--runs", default=None, help="runs dir holding (or receiving) the pretrained built-in model")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(run_worker(args.worker, json.loads(args.spec))), flush=True)
        return
    import torch

    if args.threads > 0:  # also for pretraining the built-in model here (see the docstring on threads)
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    args.model = args.model or ("random:compact-mini" if args.quick else "tiny-llama" if cuda else "builtin:compact-mini")
    args.method = args.method or ("full" if args.model == "random:compact-mini" else "qlora" if cuda else "lora")
    args.epochs = args.epochs or (2.0 if args.quick else 3.0)
    args.lr = args.lr or (1e-3 if args.method == "full" else 2e-4)
    args.repeats = args.repeats or (1 if args.quick else 2)
    with tempfile.TemporaryDirectory() as tmp:
        spec = _prepare(args, Path(tmp))
        results = []
        for i in range(args.repeats):  # alternate the order: a machine that slows down over time favours neither
            for recipe in (("plain", "ours") if i % 2 == 0 else ("ours", "plain")):
                print(f"run {i + 1}/{args.repeats}: {recipe} ...", flush=True)
                results.append(_run(recipe, spec))
    text, ok = _table(results, spec)
    print()
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"spec": spec, "results": results}, indent=1), encoding="utf-8")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
