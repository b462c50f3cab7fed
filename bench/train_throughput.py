"""Training throughput of the app's default recipe against baselines nobody can call unfair, same model, data,
hardware, optimizer steps and samples.

Not a test: it prints a markdown table per suite and PASS/FAIL against the targets of the benchmark issue,
measured against the *strongest* baseline:

    useful (non-padding) tokens/s  >= 1.5x
    peak memory                    <= 1.0x
    eval loss after the same optimizer steps within +-2%

    python bench/train_throughput.py [--suite builtin-full,builtin-lora,llama-lora,llama-qlora] [--repeats N]
                                     [--ablation] [--candidates] [--recipes library,ours] [--epochs E] [--json OUT]

Recipes (all the transformers `Trainer` with the engine's own TrainingArguments (engine/training/trainer.py), the
same model init, data rows, held-out eval rows, seed, optimizer, learning rate, schedule and number of epochs):
  plain    the course's recipe: every sample padded to max_seq_len, batch 1, gradient accumulation = the samples
           of one of our optimizer steps (the course uses 8; matched here so every recipe makes the same steps),
           fp32, no packing.
  library  the library-default recipe done right: dynamic padding to the batch's longest sample (a multiple of 8),
           the same micro-batch and accumulation as ours, the library's default precision (fp32 on a CPU, as
           `Trainer` picks it), no packing. This is the strongest baseline: what a careful user gets from
           transformers without our engine.
  ours     the app's defaults exactly as the Start button runs them: `precision=auto` (bf16 autocast over fp32
           master weights where this CPU is fast at bf16: engine/hardware/cpu_bf16.py), packing inside each
           micro-batch (the same samples per optimizer step: engine/data/packing.py `pack_micro_batch`), and the
           run's Trainer class (engine/training/trainer.py `trainer_class`: the loss on the scored positions only,
           engine/training/loss.py; the start-up objects frozen out of its opening gc.collect; the FLOP tally's
           parameters counted once) and, on a CPU, the adapters' cheaper dropout (engine/training/fast_dropout.py),
           4-bit layers that return bf16 under autocast like torch's Linear (engine/training/autocast_4bit.py),
           attention in fp32 (engine/training/fp32_attention.py) and a bounded oneDNN kernel cache
           (engine/hardware/cpu_bf16.py `bound_kernel_cache`).
  --ablation adds "library + bf16" (dynamic padding with our precision) and "ours in fp32" (packing alone), to
           show where the gain comes from.
  --candidates adds the speed-ups measured before adopting them (each is ours with one change):
           ours-compile   `TrainingArguments(torch_compile=True)`: the Trainer compiles the model with inductor
                          (C++ kernels on a CPU, Triton on CUDA); the compile time is inside the timed train()
           ours-foreach   AdamW with `foreach=True` (multi-tensor) instead of our fused AdamW
           ours-forloop   AdamW as torch runs it on a CPU by default (a loop over the parameters)
           ours-chunked   the scored-positions loss computed in chunks of 1024 positions, each chunk's logits
                          recomputed in the backward pass (never a whole `positions x vocabulary` fp32 matrix), as
                          the chunked/fused cross-entropy losses of Liger and Unsloth do

Suites (the issue's "built-in data and a tiny Llama with LoRA and QLoRA"):
  builtin-full   the pretrained built-in compact-mini, full fine-tune on builtin:dates with the fine-tune form's
                 defaults (micro-batch 16, 64 tokens, lr 1e-3): exactly the first run a visitor starts.
  builtin-lora   the same model and data, LoRA (r 16 on all linear layers, lr 2e-3).
  llama-lora     a randomly initialised Llama-architecture model (4 layers, hidden 256), LoRA on
                 builtin:instructions (micro-batch 8, 256 tokens).
  llama-qlora    the same in 4-bit (bitsandbytes nf4 on the CPU), QLoRA.

Measurement: each recipe runs in its own subprocess (a process's peak RSS cannot be reset), the recipes of a suite
interleaved, in forward order in odd repetitions and reversed in even ones (A B C, C B A, ...: over each pair of
repetitions every recipe has run as often early as late, so no recipe gets the quieter minute by its place), and
every repetition is printed (tok/s of each recipe and ours' ratio to each recipe measured in the same repetition)
beside the max and median. Peak memory: on CUDA
`torch.cuda.max_memory_allocated` during `trainer.train()`; on CPU the resident set size sampled every 2 ms during
`trainer.train()` minus the RSS just before it ("train peak": activations, gradients, optimizer state, autocast
copies, allocator growth), with glibc told to return freed blocks >= 64 KiB at once so that RSS follows the live
tensors. That setting slows training by a third to a half (every large allocation becomes a fresh mmap), so memory
is measured in separate runs (one per recipe and suite) and tokens/s in runs with the allocator as a training run
gets it. Eval loss: one function for every recipe (each held-out sample alone, token-weighted cross-entropy).
Threads: 1 by default (`--threads`): on a shared 2-core machine a 2-thread OpenMP team stalls at its barriers.
"""

from __future__ import annotations

import argparse
import contextlib
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

TARGET_SPEEDUP, TARGET_MEMORY, TARGET_LOSS = 1.5, 1.0, 0.02
RECIPES = ("plain", "library", "ours")
ABLATION = ("library-bf16", "ours-fp32")
CANDIDATES = ("ours-compile", "ours-foreach", "ours-forloop", "ours-chunked")
# Liger's Triton kernels (transformers' `use_liger_kernel=True`, the liger-kernel package): CUDA only, named with --recipes
# (the GPU kit's throughput section, bench/gpu_kit/throughput.py, runs it when the kit carries liger-kernel)
CUDA_ONLY = ("ours-liger",)
LABELS = {
    "plain": "plain (pad to max, batch 1, fp32)",
    "library": "library default (dynamic padding, fp32)",
    "ours": "ours = app defaults (packing + auto precision)",
    "library-bf16": "ablation: library + bf16 autocast",
    "ours-fp32": "ablation: ours in fp32 (packing alone)",
    "ours-compile": "candidate: ours + torch.compile (inductor, compile time included)",
    "ours-foreach": "candidate: ours with foreach AdamW",
    "ours-forloop": "candidate: ours with for-loop AdamW (torch's CPU default)",
    "ours-chunked": "candidate: ours + chunked loss (1024 positions)",
    "ours-liger": "candidate: ours + Liger kernels (use_liger_kernel, CUDA)",
}
SUITES: dict[str, dict[str, Any]] = {
    "builtin-full": {"model": "builtin", "method": "full", "dataset": "builtin:dates", "micro_batch": 16, "grad_accum": 1,
                     "max_seq_len": 64, "lr": 1e-3, "epochs": 1.0},
    "builtin-lora": {"model": "builtin", "method": "lora", "dataset": "builtin:dates", "micro_batch": 16, "grad_accum": 1,
                     "max_seq_len": 64, "lr": 2e-3, "epochs": 1.0},
    "llama-lora": {"model": "tiny-llama", "method": "lora", "dataset": "builtin:instructions", "micro_batch": 8, "grad_accum": 1,
                   "max_seq_len": 256, "lr": 2e-3, "epochs": 1.0},
    "llama-qlora": {"model": "tiny-llama", "method": "qlora", "dataset": "builtin:instructions", "micro_batch": 8, "grad_accum": 1,
                    "max_seq_len": 256, "lr": 2e-3, "epochs": 1.0},
}


# --------------------------------------------------------------------------------------------------
# Worker: one recipe of one suite in this process
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


def _train_config(recipe: str, spec: dict[str, Any]) -> Any:
    """The TrainConfig of `recipe`: the app's defaults for ours, the same with the baseline's differences otherwise."""
    from engine.config import TrainConfig

    ours = recipe.startswith("ours")
    plain = recipe == "plain"
    precision = "fp32" if recipe in ("plain", "library", "ours-fp32") else "auto"
    if recipe == "library-bf16":
        precision = "bf16"
    return TrainConfig(
        method=spec["method"], base_model=spec["path"], dataset=spec["dataset"], epochs=spec["epochs"], max_steps=0,
        learning_rate=spec["lr"], micro_batch_size=1 if plain else spec["micro_batch"],
        grad_accum=spec["micro_batch"] * spec["grad_accum"] if plain else spec["grad_accum"], max_seq_len=spec["max_seq_len"],
        precision=precision, packing=ours, eval_fraction=0.1, seed=spec["seed"], save_steps=100_000, logging_steps=100_000,
    )


def _model(cfg: Any, spec: dict[str, Any], device: Any, dtype: Any) -> tuple[Any, Any]:
    """(model ready for training, tokenizer): loaded and prepared the way a run does (engine/training/run.py)."""
    import torch

    from engine.config import QuantSettings
    from engine.hardware.device import master_dtype
    from engine.models.loading import load_model
    from engine.runs import EventLog
    from engine.training.adapters import prepare_for_method

    quant = QuantSettings(mode="4bit", compute_dtype=cfg.precision) if cfg.method == "qlora" else QuantSettings(mode="none", compute_dtype=cfg.precision)
    loaded = load_model(cfg.base_model, quant, allow_local_paths=True, dtype=master_dtype(cfg.method, dtype, device), device=device)
    torch.manual_seed(spec["seed"])  # the same LoRA init in every recipe
    with tempfile.TemporaryDirectory() as tmp:
        model = prepare_for_method(cfg, loaded.model, EventLog(Path(tmp) / "events.jsonl"))
    loaded.tokenizer.padding_side = "right"
    return model, loaded.tokenizer


def eval_loss(model: Any, examples: list[dict[str, list[int]]], device: Any, dtype: Any) -> float:
    """Token-weighted cross-entropy over the held-out samples, each run alone (no padding, no packing), in the
    recipe's compute dtype (autocast on a CPU in bf16, as the Trainer evaluates)."""
    import contextlib

    import torch

    from engine.data.tokenize import IGNORE_INDEX

    model.eval()
    total, count = 0.0, 0
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if device.kind == "cpu" and dtype == torch.bfloat16
                else contextlib.nullcontext())
    with torch.no_grad(), autocast:
        for ex in examples:
            ids = torch.tensor([ex["input_ids"]], device=device.torch_device)
            labels = torch.tensor([ex["labels"]], device=device.torch_device)
            n = sum(x != IGNORE_INDEX for x in ex["labels"][1:])
            total += model(input_ids=ids, labels=labels, use_cache=False).loss.float().item() * n
            count += n
    model.train()
    return total / count


def run_worker(recipe: str, spec: dict[str, Any]) -> dict[str, Any]:
    import resource

    if recipe.startswith("ours"):  # as `python -m engine train` does first (the app's training subprocess)
        from engine.hardware.cpu_bf16 import bound_kernel_cache

        bound_kernel_cache()

    import torch
    from transformers import DataCollatorForSeq2Seq, Trainer

    from engine.data.build import build_train_data
    from engine.data.packing import PackingCollator, packed_row_multiple
    from engine.hardware.device import detect_device, dtype_name, resolve_dtype
    from engine.training.autocast_4bit import autocast_4bit_outputs
    from engine.training.fast_dropout import use_fast_dropout
    from engine.training.fp32_attention import fp32_attention
    from engine.training.trainer import trainer_class, training_args

    device = detect_device()
    if device.kind == "cpu" and spec["threads"] > 0:
        torch.set_num_threads(spec["threads"])
    cfg = _train_config(recipe, spec)
    dtype = resolve_dtype(cfg.precision, device)
    model, tokenizer = _model(cfg, spec, device, dtype)
    if recipe.startswith("ours") and device.kind == "cpu":  # as engine/training/run.py does
        use_fast_dropout(model)  # the baselines keep peft's torch dropout
        autocast_4bit_outputs(model)  # QLoRA under bf16 autocast: 4-bit layers return bf16 (ours-fp32: no autocast)
    data = build_train_data(cfg, tokenizer, cfg.max_seq_len, pack=cfg.packing, row_multiple=packed_row_multiple(cfg.max_seq_len, device.kind))
    if recipe == "plain":
        collator = DataCollatorForSeq2Seq(tokenizer, padding="max_length", max_length=cfg.max_seq_len, label_pad_token_id=-100)
    else:  # dynamic padding to a multiple of 8 for plain examples (the library default), packed rows for ours
        collator = PackingCollator(tokenizer, pad_to_multiple_of=8, packed_multiple=packed_row_multiple(cfg.max_seq_len, device.kind))
    useful_per_epoch = sum(len(e["input_ids"]) for e in data.train)
    with tempfile.TemporaryDirectory() as out:
        args = training_args(cfg, Path(out), device, dtype, has_eval=False)
        # ours: the run's own Trainer class (engine/training/trainer.py: the loss on the scored positions only);
        # the baselines: transformers' Trainer as it comes
        trainer_cls = trainer_class(cfg.method) if recipe.startswith("ours") else Trainer
        extra: dict[str, Any] = {}
        if recipe == "ours-compile":  # the Trainer's own option (accelerate's TorchDynamoPlugin), as a user would turn it on
            args.torch_compile, args.torch_compile_backend = True, "inductor"
        elif recipe in ("ours-foreach", "ours-forloop"):  # the Trainer's AdamW settings, another implementation
            params = [q for q in model.parameters() if q.requires_grad]
            extra["optimizers"] = (torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                                     foreach=recipe == "ours-foreach"), None)
        elif recipe == "ours-chunked":
            trainer_cls = type("ChunkedLossTrainer", (ChunkedLoss, trainer_cls), {})
        elif recipe == "ours-liger":  # the Trainer patches the model with Liger's kernels (RMSNorm, SwiGLU, RoPE, fused loss)
            args.use_liger_kernel = True
        trainer = trainer_cls(model=model, args=args, train_dataset=data.train, data_collator=collator, processing_class=tokenizer, **extra)
        if device.kind == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base_alloc = torch.cuda.memory_allocated()
        ours_cpu = recipe.startswith("ours") and device.kind == "cpu"
        with _RssPeak() as rss, fp32_attention() if ours_cpu else contextlib.nullcontext():  # as engine/training/run.py
            t0, c0 = time.perf_counter(), time.process_time()
            trainer.train()
            if device.kind == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            cpu_seconds = time.process_time() - c0  # every thread of this process: what other load cannot inflate
        peak = (torch.cuda.max_memory_allocated() - base_alloc) if device.kind == "cuda" else rss.peak - rss.start
        useful = trainer.state.num_input_tokens_seen
        speed_run = spec["measure"] == "speed"  # a memory run's clock is slowed by its allocator setting (_run)
        loss_after = eval_loss(model, data.evals, device, dtype) if speed_run else None
        accuracy = _date_accuracy(model, tokenizer, device, dtype) if speed_run and cfg.dataset == "builtin:dates" else None
    return {
        "recipe": recipe, "measure": spec["measure"], "device": device.name, "device_kind": device.kind, "dtype": dtype_name(dtype),
        "rows": len(data.train), "samples": data.report.get("train_examples"), "micro_batch": args.per_device_train_batch_size,
        "grad_accum": args.gradient_accumulation_steps, "steps": trainer.state.global_step, "seconds": seconds,
        "useful_tokens": int(useful), "expected_useful": int(useful_per_epoch * cfg.epochs),
        "tok_s": useful / seconds, "cpu_s": cpu_seconds, "tok_per_cpu_s": useful / cpu_seconds, "train_peak_mib": peak / 2**20, "process_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "eval_after": loss_after, "date_accuracy": accuracy,
    }


class _ChunkedCrossEntropy:
    """sum of cross-entropy(hidden @ weight.T, targets) over rows, `chunk` rows at a time, each chunk's logits
    recomputed in the backward pass (the `rows x vocabulary` matrix is never whole). Built lazily (torch import)."""

    fn: Any = None

    @classmethod
    def apply(cls, hidden: Any, weight: Any, targets: Any, chunk: int) -> Any:
        if cls.fn is None:
            cls.fn = _make_chunked_ce()
        return cls.fn.apply(hidden, weight, targets, chunk)


def _make_chunked_ce() -> Any:
    import torch
    import torch.nn.functional as F

    class ChunkedCE(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cpu")
        def forward(ctx: Any, hidden: Any, weight: Any, targets: Any, chunk: int) -> Any:
            total = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for i in range(0, hidden.shape[0], chunk):
                total += F.cross_entropy(F.linear(hidden[i:i + chunk], weight).float(), targets[i:i + chunk], reduction="sum")
            ctx.save_for_backward(hidden, weight, targets)
            ctx.chunk = chunk
            return total

        @staticmethod
        @torch.amp.custom_bwd(device_type="cpu")
        def backward(ctx: Any, grad: Any) -> Any:
            hidden, weight, targets = ctx.saved_tensors
            grad_hidden = torch.empty_like(hidden)
            grad_weight = torch.zeros_like(weight, dtype=torch.float32) if weight.requires_grad else None
            for i in range(0, hidden.shape[0], ctx.chunk):
                h = hidden[i:i + ctx.chunk]
                logits = F.linear(h, weight)
                d = torch.softmax(logits.float(), dim=-1)
                d[torch.arange(d.shape[0]), targets[i:i + ctx.chunk]] -= 1
                d = (d * grad).to(logits.dtype)
                grad_hidden[i:i + ctx.chunk] = (d @ weight.to(d.dtype)).to(hidden.dtype)
                if grad_weight is not None:
                    grad_weight += (d.t() @ h.to(d.dtype)).float()
            return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None

    return ChunkedCE


class ChunkedLoss:
    """Mixed before the run's Trainer class for the "ours-chunked" candidate: the scored-positions loss of
    engine/training/loss.py with the head and cross-entropy computed chunk by chunk (_ChunkedCrossEntropy)."""

    chunk = 1024

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
        import torch

        from engine.training.loss import scored_positions

        labels = inputs.get("labels")
        head = self.accelerator.unwrap_model(model).get_output_embeddings()
        if return_outputs or labels is None or head is None or getattr(head, "bias", None) is not None:
            return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        keep, targets = scored_positions(labels)
        captured: list[Any] = []

        def grab(_module: Any, args: tuple) -> None:
            captured.append(args[0][keep])
            raise _Captured

        handle = head.register_forward_pre_hook(grab)
        try:
            model(**{k: v for k, v in inputs.items() if k != "labels"})
        except _Captured:
            pass
        finally:
            handle.remove()
        loss = _ChunkedCrossEntropy.apply(captured[0], head.weight, targets, self.chunk)
        if self.model_accepts_loss_kwargs and num_items_in_batch is not None:
            return loss / (num_items_in_batch.to(loss.device) if torch.is_tensor(num_items_in_batch) else num_items_in_batch)
        return loss / targets.numel()


class _Captured(Exception):
    """Raised by ChunkedLoss's hook to stop the forward pass at the output head (its input is all the loss needs)."""


def _date_accuracy(model: Any, tokenizer: Any, device: Any, dtype: Any) -> float:
    """Exact-match accuracy on the 100 held-out items of the date task, generated greedily as the run scores it
    (engine/inference/tasks.py), in the recipe's compute dtype."""
    import contextlib

    import torch

    from engine.inference.tasks import date_items, evaluate_task

    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if device.kind == "cpu" and dtype == torch.bfloat16
                else contextlib.nullcontext())
    tokenizer.padding_side = "left"
    with autocast:
        score = evaluate_task(model, tokenizer, date_items("test"))
    model.train()
    return score.accuracy


# --------------------------------------------------------------------------------------------------
# Parent: prepare the models once, run the recipes in subprocesses, print the tables
# --------------------------------------------------------------------------------------------------


def _prepare(model: str, args: argparse.Namespace, tmp: Path, cache: dict[str, str]) -> str:
    """The folder of `model` ("builtin": the pretrained built-in, pretrained into --runs first if missing;
    "tiny-llama": a randomly initialised Llama saved with the built-in corpus' tokenizer)."""
    if model in cache:
        return cache[model]
    if model == "builtin":
        from engine.refs import default_runs_dir
        from engine.training.builtin import ensure_builtin
        from engine.training.run import run_training

        runs = Path(args.runs) if args.runs else default_runs_dir()
        print(f"built-in compact-mini from {runs} (pretrained there first if missing)", flush=True)
        cache[model] = str(ensure_builtin("compact-mini", runs, pretrain=run_training))
    else:
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
        cache[model] = str(path)
    return cache[model]


def _run(recipe: str, spec: dict[str, Any], measure: str) -> dict[str, Any]:
    """One recipe in its own process. measure "speed": the allocator as a run gets it (tokens/s, eval loss);
    "memory": the same training with glibc returning freed memory at once (train peak)."""
    env = dict(os.environ)
    if spec["threads"]:
        env.setdefault("OMP_NUM_THREADS", str(spec["threads"]))
    if measure == "memory":
        # glibc keeps freed memory in its heap (RSS = a high-water mark that depends on the order of allocations);
        # serving allocations >= 64 KiB with mmap and trimming returns them at once, so the sampled RSS follows the
        # live tensors. Same setting for every recipe. It also makes every large allocation a fresh mmap, which
        # slows training by a third to a half, so the speed runs leave the allocator alone.
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
        env.setdefault("MALLOC_TRIM_THRESHOLD_", "65536")
    spec = {**spec, "measure": measure}
    proc = subprocess.run([sys.executable, __file__, "--worker", recipe, "--spec", json.dumps(spec)], capture_output=True, text=True, env=env,
                          cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{recipe} worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _table(suite: str, results: list[dict[str, Any]], spec: dict[str, Any]) -> tuple[str, bool]:
    recipes = [r for r in (*RECIPES, *ABLATION, *CANDIDATES, *CUDA_ONLY) if any(x["recipe"] == r for x in results)]
    by = {r: [x for x in results if x["recipe"] == r and x["measure"] == "speed"] for r in recipes}
    mem_by = {r: [x for x in results if x["recipe"] == r and x["measure"] == "memory"] for r in recipes}
    stat = {r: {k: (min(x[k] for x in v), statistics.median(x[k] for x in v)) for k in ("tok_s", "eval_after", "seconds")}
            for r, v in by.items()}
    for r, v in mem_by.items():
        nan = (float("nan"), float("nan"))  # --no-memory: no memory runs
        stat[r].update({k: (min(x[k] for x in v), statistics.median(x[k] for x in v)) if v else nan for k in ("train_peak_mib", "process_peak_rss_mib")})
    first = by["ours"][0]
    unit = "MiB, GPU allocated" if first["device_kind"] == "cuda" else "MiB, RSS growth"
    lines = [
        f"### {suite}: {spec['method']} on {spec['model']}, {spec['dataset']} ({first['samples']} train samples), max_seq_len "
        f"{spec['max_seq_len']}, {spec['epochs']:g} epoch(s), lr {spec['lr']:g}, device {first['device']}, threads {spec['threads']}, "
        f"{len(by['ours'])} run(s) each (interleaved)",
        "",
        f"| recipe | precision | samples x micro-batch x accum | optimizer steps | useful tokens | useful tok/s (max / median) | train peak ({unit}, min / median) | eval loss after | date-task accuracy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in recipes:
        x, m = by[r][0], stat[r]
        # tok/s: the best run is the least disturbed by other load (the table shows both)
        lines.append(f"| {LABELS[r]} | {x['dtype']} | {x['rows']} x {x['micro_batch']} x {x['grad_accum']} | {x['steps']} | {x['useful_tokens']:,} | "
                     f"{max(y['tok_s'] for y in by[r]):,.0f} / {m['tok_s'][1]:,.0f} | {m['train_peak_mib'][0]:.1f} / {m['train_peak_mib'][1]:.1f} | "
                     f"{m['eval_after'][1]:.4f} | {_accuracy(by[r])} |")
    baselines = [r for r in ("plain", "library") if r in by]
    strongest = max(baselines, key=lambda r: stat[r]["tok_s"][1])
    ours, base = stat["ours"], stat[strongest]
    speed = ours["tok_s"][1] / base["tok_s"][1]
    mem = ours["train_peak_mib"][1] / base["train_peak_mib"][1] if base["train_peak_mib"][1] > 0 else float("nan")
    loss = ours["eval_after"][1] / base["eval_after"][1] - 1
    same = by["ours"][0]["steps"] == by[strongest][0]["steps"] and by["ours"][0]["useful_tokens"] == by[strongest][0]["useful_tokens"]
    lines.append("")
    lines.append("Ratios of ours to each baseline (medians): " + "; ".join(
        f"{r}: {ours['tok_s'][1] / stat[r]['tok_s'][1]:.2f}x tok/s, {ours['train_peak_mib'][1] / stat[r]['train_peak_mib'][1]:.2f}x memory, "
        f"eval loss {ours['eval_after'][1] / stat[r]['eval_after'][1] - 1:+.1%}" for r in recipes if r != "ours"))
    checks = [
        (f"against the strongest baseline ({strongest}): useful tokens/s {speed:.2f}x (target >= {TARGET_SPEEDUP}x)", speed >= TARGET_SPEEDUP),
        (f"peak memory {mem:.2f}x (target <= {TARGET_MEMORY}x)", mem <= TARGET_MEMORY) if mem == mem  # nan: --no-memory
        else ("peak memory not measured (--no-memory)", None),
        (f"eval loss after the same optimizer steps and useful tokens {loss:+.1%} (target within +-{TARGET_LOSS:.0%}; same steps and tokens: {same})",
         abs(loss) <= TARGET_LOSS and same),
    ]
    lines += [f"- {'SKIP' if ok is None else 'PASS' if ok else 'FAIL'}: {text}" for text, ok in checks]
    lines += ["", *_repetitions(by, recipes)]
    return "\n".join(lines), all(ok is not False for _, ok in checks)


def _repetitions(by: dict[str, list[dict[str, Any]]], recipes: list[str]) -> list[str]:
    """Every repetition: each recipe's tok/s (its place in that repetition's order in brackets) and ours' ratio to
    each other recipe measured in the same repetition, then the median of those paired ratios."""
    others = [r for r in recipes if r != "ours"]
    lines = ["Each repetition (useful tok/s; ratios of ours to the recipe in the same repetition):", "",
             "| repetition | " + " | ".join(LABELS[r].split(" (")[0] for r in recipes) + " | " + " | ".join(f"ours / {r}" for r in others) + " |",
             "|---|" + "---|" * (len(recipes) + len(others))]
    reps = sorted({x["repetition"] for r in recipes for x in by[r] if "repetition" in x})
    paired: dict[str, list[float]] = {r: [] for r in others}
    for i in reps:
        at = {r: next((x for x in by[r] if x.get("repetition") == i), None) for r in recipes}
        if at["ours"] is None:
            continue
        for r in others:
            if at[r] is not None:
                paired[r].append(at["ours"]["tok_s"] / at[r]["tok_s"])
        lines.append(f"| {i} | " + " | ".join(f"{at[r]['tok_s']:,.0f}" if at[r] else "-" for r in recipes) + " | "
                     + " | ".join(f"{at['ours']['tok_s'] / at[r]['tok_s']:.2f}x" if at[r] else "-" for r in others) + " |")
    lines.append("| median of paired ratios | " + " | ".join("" for _ in recipes) + " | "
                 + " | ".join(f"{statistics.median(v):.2f}x" if v else "-" for v in paired.values()) + " |")
    # tokens per CPU-second of the training process: on a machine shared with other jobs, what waiting for a core
    # cannot inflate (1 thread by default)
    cpu = {r: [x["tok_per_cpu_s"] for x in by[r] if "tok_per_cpu_s" in x] for r in recipes}
    if all(cpu.values()):
        lines += ["", "Tokens per CPU-second (median): " + "; ".join(f"{r} {statistics.median(v):,.0f}" for r, v in cpu.items())
                  + ". Ours / each: " + "; ".join(f"{r} {statistics.median(cpu['ours']) / statistics.median(cpu[r]):.2f}x" for r in others)]
    return lines


def _accuracy(runs: list[dict[str, Any]]) -> str:
    values = [x["date_accuracy"] for x in runs if x.get("date_accuracy") is not None]
    return " / ".join(f"{v:.0%}" for v in values) if values else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default=",".join(SUITES), help="comma-separated: " + ", ".join(SUITES))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ablation", action="store_true", help="also run library + bf16 and ours in fp32")
    ap.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure peak memory in one more run per recipe (--no-memory: tokens/s and loss only)")
    ap.add_argument("--candidates", action="store_true", help="also run the candidate speed-ups: " + ", ".join(CANDIDATES))
    ap.add_argument("--recipes", default=None, help="comma-separated subset to run (must include ours and a baseline), e.g. "
                    "library,ours for long runs where the plain recipe takes too long")
    ap.add_argument("--epochs", type=float, default=None, help="override every suite's epochs")
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
    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        ap.error(f"--suite: unknown {unknown}; choose from {', '.join(SUITES)}")
    recipes = (*RECIPES, *ABLATION) if args.ablation else RECIPES
    if args.candidates:
        recipes = (*recipes, *CANDIDATES)
    if args.recipes:
        chosen = tuple(r.strip() for r in args.recipes.split(",") if r.strip())
        if "ours" not in chosen or not {"plain", "library"} & set(chosen) or set(chosen) - {*RECIPES, *ABLATION, *CANDIDATES, *CUDA_ONLY}:
            ap.error(f"--recipes: ours, plain and/or library, and any of {', '.join((*ABLATION, *CANDIDATES, *CUDA_ONLY))}")
        recipes = chosen
    from engine.hardware.device import detect_device, precision_reason

    print(f"precision: {precision_reason(detect_device())}", flush=True)
    tables, ok, raw, cache = [], True, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for suite in suites:
            spec = {**SUITES[suite], "seed": args.seed, "threads": args.threads}
            if args.epochs:
                spec["epochs"] = args.epochs
            spec["path"] = _prepare(spec["model"], args, Path(tmp), cache)
            results = []
            for i in range(args.repeats):  # A B C, C B A, ...: over each pair of repetitions no recipe gets the quieter place
                order = recipes if i % 2 == 0 else tuple(reversed(recipes))
                for recipe in order:
                    print(f"{suite} run {i + 1}/{args.repeats}: {recipe} ...", flush=True)
                    result = _run(recipe, spec, "speed")
                    result["repetition"] = i + 1
                    results.append(result)
                    print(f"  {recipe}: {result['tok_s']:,.0f} tok/s, {result['tok_per_cpu_s']:,.0f} tok per CPU-second, "
                          f"{result['seconds']:.1f} s, {result['steps']} steps, eval loss {result['eval_after']:.4f}", flush=True)
            for recipe in recipes if args.memory else ():  # peak memory is deterministic enough for one run each
                print(f"{suite} memory run: {recipe} ...", flush=True)
                results.append(_run(recipe, spec, "memory"))
            text, passed = _table(suite, results, spec)
            print("\n" + text + "\n", flush=True)
            tables.append(text)
            ok = ok and passed
            raw[suite] = {"spec": spec, "results": results}
    print("\n\n".join(tables))
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1), encoding="utf-8")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
