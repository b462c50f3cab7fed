"""Accuracy benchmark of the memory estimator against published peak-memory measurements.

Not a test: it prints tables. Run `python bench/memory_accuracy.py` (add `--rows` for every row, `--json` for
machine-readable output, `--write-bands` to store the leave-one-source-out errors in
presets/estimator_accuracy.yaml, `--simulate` to compare the activation model with a fake-tensor trace of the real
transformers/peft code on CPU).

Data: bench/data/memory_calibration.csv (122 published measurements, each with its source, unit and metric; path
overridable with --csv). The table ROWS below turns a row into an estimator query, says which of our numbers is
comparable to it, and labels it:

  fit     rows that were inspected while the coefficients were first shaped (kept as a label only)
  report  rows that were not
  skip    rows that cannot be compared (vendor minimums, engines we do not model, unknown settings), with why

Every fit and report row is scored three ways: with the committed coefficients (memory.CAL); in-sample (the
coefficients of engine.estimator.accuracy.FITTED refitted on every row); and leave-one-source-out (LOSO: refitted on
the rows of every other source, then scored on the source left out). LOSO is the honest figure: it is what the
README and docs/memory.md quote and what the ± band of every estimate comes from. Rows of one publisher (a
repository, a site) form one source; a blog that republishes a benchmark's numbers counts with that benchmark.

Metrics: "alloc" = torch.cuda.max_memory_allocated (our allocated_gib); "reserved" = torch's reserved peak
(our allocated + fragmentation); "smi" = nvidia-smi / NVML for the whole process (our total: + CUDA context);
"capacity" = the row reports the longest context that fits a card of that size, so the card's size is the
measurement and our need (allocated + fragmentation + context) at that context is the prediction.

In the same run the accelerate rules are computed as the baseline the issue names: weights x dtype bytes for
inference x 1.2; 4 x weights (16 bytes/param fp32, 8 for 16-bit) for training. Fits/OOM accuracy: for every
scored row and every GPU tier of presets/hardware.yaml, does "prediction <= usable" agree with
"measurement <= usable" (both on the row's own metric, context taken off the card where the metric excludes it)?
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.config import MemoryQuery  # noqa: E402
from engine.estimator import accuracy, memory  # noqa: E402
from engine.estimator.catalog import hardware_tiers  # noqa: E402
from engine.estimator.memory import GIB, estimate, estimate_by_key, fragmentation, query_key  # noqa: E402

DEFAULT_CSV = ROOT / "bench" / "data" / "memory_calibration.csv"
# Published "fits / ran out of memory" outcomes on a named card (no peak figure): the verdict must agree.
OUTCOMES_CSV = ROOT / "bench" / "data" / "memory_outcomes.csv"
# LLaMA-1 architectures of the QLoRA paper (huggyllama/llama-30b and -65b config.json), given inline: not in the catalog.
_LLAMA1 = {"llama-65b": dict(L=80, h=8192, a=64, i=22016), "llama-30b": dict(L=60, h=6656, a=52, i=17920)}

# litgpt 2023 resource tables: bf16-true (everything bf16, no autocast), LoRA r=8 alpha=16 on q,v with dropout
# 0.05, chunked CE (bf16 logits kept), torch AdamW with bf16 states; QLoRA = the same on bnb nf4 with paged AdamW.
_LIT_LORA = dict(task="lora", weight_precision="bf16", training_precision="pure-bf16", optimizer="adamw-foreach", lora_r=8,
                 lora_targets="q,v", lora_dropout=0.05, chunked_loss=True, grad_ckpt=False)
_LIT_QLORA = dict(_LIT_LORA, task="qlora", weight_precision="nf4", double_quant=False, optimizer="paged-adamw-32bit")
_LIT_INF = dict(task="inference", seq_len=6, new_tokens=50)  # 'Hello, my name is' + 50 new tokens
# litgpt's own Phi runs GELU as one kernel (F.gelu(approximate="tanh")), where transformers' Phi runs gelu_new as
# Python ops that each keep a tensor: the rows are estimated on the same config with litgpt's activation.
_LIT_PHI = str(ROOT / "bench" / "data" / "litgpt_phi-1_5.config.json")
# torchtune April 2024 LoRA tutorials: bf16 model and adapters, AdamW, activation checkpointing, batch 2,
# alpaca_cleaned padded to the longest sample of the batch (the peak is the batch holding the longest
# sample: 1304 tokens with the Llama-2 tokenizer per the litgpt note), fp32 logits (torchtune upcasts).
_TT_LORA = dict(task="lora", weight_precision="bf16", training_precision="pure-bf16", optimizer="adamw", batch=2,
                seq_len=1304, grad_ckpt=True, lora_dropout=0.05, chunked_loss=False)
# Unsloth's "Hugging Face + FA2" QLoRA baseline: r=32 all linear, batch 1, padded to max length; optimizer and
# checkpointing unstated: 8-bit AdamW and checkpointing assumed (the slope of the rows needs checkpointing).
_UNS = dict(task="qlora", weight_precision="nf4", double_quant=True, optimizer="adamw-8bit", lora_r=32, lora_targets="all-linear",
            lora_dropout=0.0, batch=1, grad_ckpt=True)
_QWEN = dict(task="inference", weight_precision="bf16", batch=1, new_tokens=2048)
# transformers' single-GPU training guide (4.2x): bert-large-uncased fine-tuned as a sequence classifier, 512 tokens,
# fp32 weights, eager attention (BERT had no SDPA then) with dropout 0.1; adamw_hf updated parameter by parameter.
_BERT = dict(task="full", model=str(ROOT / "bench" / "data" / "bert-large-uncased.config.json"), weight_precision="fp32",
             training_precision="fp32", optimizer="adamw", attention="eager", seq_len=512)
_BERT_AMP = dict(_BERT, training_precision="amp-fp16")
# Answer.AI's fsdp_qlora benchmarks (train.py defaults): Llama-2 7B on 2 GPUs, FSDP FULL_SHARD, everything bf16, LoRA r=64
# on k,q,v,gate,up,down with dropout 0.1, torch AdamW, activation checkpointing, padded dummy data.
_AAI_Q = dict(model="llama-2-7b", task="qlora", weight_precision="nf4", double_quant=False, training_precision="pure-bf16", optimizer="adamw-foreach",
              lora_r=64, lora_targets="q,k,v,gate,up,down", lora_dropout=0.1, grad_ckpt=True, distributed="fsdp", gpus=2)
_AAI_L = dict(_AAI_Q, task="lora", weight_precision="bf16")
_YI_34B = "manual:L=60,h=7168,a=56,kv=8,i=20480,v=64000,tied=0"  # 01-ai/Yi-34B config.json

# row index -> (split, metric, query, note). Row indices count data rows of calibration.csv from 0.
ROWS: dict[int, tuple[str, str, dict[str, Any], str]] = {
    0: ("report", "alloc", dict(_LIT_LORA, model=_LIT_PHI, batch=1, seq_len=1044), ""),
    1: ("report", "alloc", dict(_LIT_QLORA, model=_LIT_PHI, batch=1, seq_len=1044), ""),
    2: ("report", "alloc", dict(_LIT_QLORA, model=_LIT_PHI, batch=1, seq_len=1044, double_quant=True), ""),
    3: ("report", "alloc", dict(_LIT_LORA, model=_LIT_PHI, batch=2, seq_len=1044), ""),
    4: ("report", "alloc", dict(_LIT_LORA, model=_LIT_PHI, batch=4, seq_len=1044), ""),
    5: ("report", "alloc", dict(_LIT_LORA, model="stablelm-base-alpha-3b", batch=1, seq_len=1034), ""),
    6: ("report", "alloc", dict(_LIT_QLORA, model="stablelm-base-alpha-3b", batch=1, seq_len=1034), ""),
    7: ("report", "alloc", dict(_LIT_QLORA, model="stablelm-base-alpha-3b", batch=1, seq_len=1034, double_quant=True), ""),
    8: ("report", "alloc", dict(_LIT_LORA, model="stablelm-base-alpha-3b", batch=2, seq_len=1034), ""),
    9: ("report", "alloc", dict(_LIT_LORA, model="stablelm-base-alpha-3b", batch=4, seq_len=1034), ""),
    10: ("fit", "alloc", dict(_LIT_LORA, model="llama-2-7b", batch=1, seq_len=1304), "sets frozen_input_saved"),
    11: ("fit", "alloc", dict(_LIT_QLORA, model="llama-2-7b", batch=1, seq_len=1304), "sets quantized_input_saved (after frozen_input_saved)"),
    12: ("fit", "alloc", dict(_LIT_QLORA, model="llama-2-7b", batch=1, seq_len=1304, double_quant=True), "sets quantized_input_saved (after frozen_input_saved)"),
    13: ("fit", "alloc", dict(_LIT_LORA, model="llama-2-7b", batch=2, seq_len=1304), "sets frozen_input_saved"),
    14: ("report", "alloc", dict(_LIT_LORA, model="llama-2-13b", batch=1, seq_len=1304), ""),
    15: ("report", "alloc", dict(_LIT_QLORA, model="llama-2-13b", batch=1, seq_len=1304), ""),
    16: ("report", "alloc", dict(_LIT_QLORA, model="llama-2-13b", batch=1, seq_len=1304, double_quant=True), ""),
    17: ("report", "alloc", dict(_LIT_INF, model=_LIT_PHI, weight_precision="bf16"), ""),
    18: ("report", "alloc", dict(_LIT_INF, model=_LIT_PHI, weight_precision="nf4", double_quant=False), ""),
    19: ("report", "alloc", dict(_LIT_INF, model=_LIT_PHI, weight_precision="nf4", double_quant=True), ""),
    20: ("report", "alloc", dict(_LIT_INF, model="stablelm-base-alpha-3b", weight_precision="bf16"), ""),
    21: ("report", "alloc", dict(_LIT_INF, model="stablelm-base-alpha-3b", weight_precision="nf4", double_quant=False), ""),
    22: ("report", "alloc", dict(_LIT_INF, model="stablelm-base-alpha-3b", weight_precision="nf4", double_quant=True), ""),
    23: ("fit", "alloc", dict(_LIT_INF, model="llama-2-7b", weight_precision="bf16"), "checks weights"),
    24: ("fit", "alloc", dict(_LIT_INF, model="llama-2-7b", weight_precision="nf4", double_quant=False), "checks 4-bit bytes"),
    25: ("fit", "alloc", dict(_LIT_INF, model="llama-2-7b", weight_precision="nf4", double_quant=True), "checks double quant"),
    26: ("report", "alloc", dict(_LIT_INF, model="llama-2-13b", weight_precision="bf16"), ""),
    27: ("report", "alloc", dict(_LIT_INF, model="llama-2-13b", weight_precision="nf4", double_quant=False), ""),
    28: ("report", "alloc", dict(_LIT_INF, model="llama-2-13b", weight_precision="nf4", double_quant=True), ""),
    29: ("report", "alloc", dict(_LIT_INF, model="codellama-34b", weight_precision="nf4", double_quant=False), ""),
    30: ("report", "alloc", dict(_LIT_INF, model="codellama-34b", weight_precision="nf4", double_quant=True), ""),
    31: ("report", "alloc", dict(_LIT_INF, model="falcon-40b", weight_precision="nf4", double_quant=False), ""),
    32: ("report", "alloc", dict(_LIT_INF, model="falcon-40b", weight_precision="nf4", double_quant=True), ""),
    33: ("report", "alloc", dict(_LIT_INF, model="llama-2-70b", weight_precision="nf4", double_quant=True), ""),
    34: ("report", "alloc", dict(_LIT_LORA, model="stablelm-base-alpha-3b", weight_precision="fp32", training_precision="amp-bf16",
                                 batch=1, seq_len=1034), "fp32 weights + bf16 autocast; AdamW fp32 states"),
    35: ("report", "alloc", dict(_LIT_INF, model="llama-2-7b", weight_precision="fp32"), "litgpt wraps generate in autocast: we do not (see docs)"),
    36: ("report", "reserved", dict(task="full", model="llama-3.1-8b", weight_precision="bf16", training_precision="pure-bf16",
                                    optimizer="paged-adamw-8bit", batch=2, seq_len=2048, grad_ckpt=True, chunked_loss=True),
         "assumed torchtune 8B_full_single_device defaults (paged 8-bit AdamW, activation checkpointing, chunked CE); optimizer-in-backward and compile not modeled"),
    37: ("skip", "", {}, "torch.compile on and checkpointing unstated: compiled activations are not modeled"),
    38: ("report", "alloc", dict(task="full", model="llama-3.2-3b", weight_precision="bf16", training_precision="pure-bf16", optimizer="adamw",
                                 batch=2, seq_len=640, grad_ckpt=False), "unpacked: effective length = longest sample of the batch, assumed 640"),
    39: ("skip", "", {}, "activation offloading + compile: not modeled"),
    40: ("skip", "", {}, "activation offloading + compile + torchao NF4: not modeled"),
    41: ("report", "reserved", dict(_TT_LORA, model="llama-2-7b", lora_r=8, lora_targets="q,v"), ""),
    42: ("report", "reserved", dict(_TT_LORA, model="llama-2-7b", lora_r=8, lora_targets="all-linear,lm_head"), ""),
    43: ("report", "reserved", dict(_TT_LORA, model="llama-2-7b", lora_r=64, lora_targets="q,v"), ""),
    44: ("report", "reserved", dict(_TT_LORA, model="llama-2-7b", lora_r=64, lora_targets="all-linear,lm_head"), ""),
    45: ("skip", "", {}, "memory after model init only, not a training peak"),
    46: ("report", "reserved", dict(_TT_LORA, model="llama-2-7b", lora_r=8, lora_targets="q,v"), ""),
    47: ("skip", "", {}, "reserved memory is dominated by torchtune's bf16 load before NF4 quantization (9.13 GiB after init)"),
    48: ("skip", "", {}, "mt0-xxl is an encoder-decoder (seq2seq), not a causal LM"),
    49: ("report", "smi", dict(task="lora", model="bloom-7b1", weight_precision="fp32", training_precision="fp32", optimizer="adamw-foreach",
                               lora_r=8, lora_targets="q", lora_dropout=0.1, batch=8, seq_len=64), "peft example: fp32, batch 8, short tweets (64 tokens assumed)"),
    50: ("skip", "", {}, "prompt length not stated"),
    51: ("skip", "", {}, "prompt length not stated"),
    52: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp16", batch=1, seq_len=512, new_tokens=512), "sets context"),
    53: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp16", batch=2, seq_len=512, new_tokens=512), "sets context"),
    54: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp16", batch=4, seq_len=512, new_tokens=512), "sets context"),
    55: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp16", batch=8, seq_len=512, new_tokens=512), "sets context"),
    56: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp16", batch=16, seq_len=512, new_tokens=512), "sets context"),
    57: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="nf4", double_quant=True, batch=1, seq_len=512, new_tokens=512), "GPTQ int4 ~ 4-bit"),
    58: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="nf4", double_quant=True, batch=16, seq_len=512, new_tokens=512), "GPTQ int4 ~ 4-bit"),
    59: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp16", batch=1, seq_len=512, new_tokens=1), "prefill"),
    60: ("fit", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp16", batch=16, seq_len=512, new_tokens=1), "prefill"),
    61: ("report", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp4", double_quant=False, batch=1, seq_len=512, new_tokens=512),
         "bnb 4-bit defaults (fp4, no double quant)"),
    62: ("report", "smi", dict(task="inference", model="llama-2-13b", weight_precision="fp4", double_quant=False, batch=16, seq_len=512, new_tokens=512),
         "bnb 4-bit defaults (fp4, no double quant)"),
    63: ("report", "alloc", dict(_QWEN, model="qwen2.5-0.5b", seq_len=1), ""),
    64: ("report", "alloc", dict(_QWEN, model="qwen2.5-0.5b", seq_len=30720), ""),
    65: ("report", "alloc", dict(_QWEN, model="qwen2.5-1.5b", seq_len=1), ""),
    66: ("report", "alloc", dict(_QWEN, model="qwen2.5-1.5b", seq_len=30720), ""),
    67: ("report", "alloc", dict(_QWEN, model="qwen2.5-7b", seq_len=1), ""),
    68: ("report", "alloc", dict(_QWEN, model="qwen2.5-7b", seq_len=6144), ""),
    69: ("report", "alloc", dict(_QWEN, model="qwen2.5-7b", seq_len=14336), ""),
    70: ("report", "alloc", dict(_QWEN, model="qwen2.5-7b", seq_len=30720), ""),
    71: ("report", "alloc", dict(_QWEN, model="qwen2.5-7b", seq_len=1, weight_precision="nf4", double_quant=True), "GPTQ int4 ~ 4-bit"),
    72: ("report", "alloc", dict(_QWEN, model="qwen2.5-7b", seq_len=30720, weight_precision="nf4", double_quant=True), "GPTQ int4 ~ 4-bit"),
    73: ("report", "alloc", dict(_QWEN, model="qwen2.5-7b", seq_len=1, weight_precision="int8"), "GPTQ int8 ~ int8"),
    74: ("report", "alloc", dict(_QWEN, model="qwen2.5-14b", seq_len=1), ""),
    75: ("report", "alloc", dict(_QWEN, model="qwen2.5-14b", seq_len=30720), ""),
    76: ("report", "alloc", dict(_QWEN, model="qwen2.5-32b", seq_len=1), ""),
    77: ("report", "alloc", dict(_QWEN, model="qwen2.5-32b", seq_len=30720), ""),
    78: ("report", "alloc", dict(_QWEN, model="qwen2.5-32b", seq_len=1, weight_precision="nf4", double_quant=True), "AWQ int4 ~ 4-bit"),
    79: ("fit", "capacity", dict(_UNS, model="llama-3.1-8b", seq_len=932), "sets loss/fragmentation"),
    80: ("fit", "capacity", dict(_UNS, model="llama-3.1-8b", seq_len=2551), "sets loss/fragmentation"),
    81: ("fit", "capacity", dict(_UNS, model="llama-3.1-8b", seq_len=5789), "sets loss/fragmentation"),
    82: ("fit", "capacity", dict(_UNS, model="llama-3.1-8b", seq_len=12264), "sets loss/fragmentation"),
    83: ("fit", "capacity", dict(_UNS, model="llama-3.1-8b", seq_len=15502), "sets loss/fragmentation"),
    84: ("fit", "capacity", dict(_UNS, model="llama-3.1-8b", seq_len=28454), "sets loss/fragmentation"),
    85: ("skip", "", {}, "Unsloth engine (custom kernels, offloaded checkpoints)"),
    86: ("skip", "", {}, "Unsloth engine (custom kernels, offloaded checkpoints)"),
    87: ("skip", "", {}, "Unsloth engine (custom kernels, offloaded checkpoints)"),
    88: ("report", "capacity", dict(_UNS, model="llama-3.1-70b", seq_len=6916), "optimizer/checkpointing unstated"),
    89: ("skip", "", {}, "Unsloth engine"),
    90: ("skip", "", {}, "vendor minimum, not a measured peak"),
    91: ("skip", "", {}, "vendor minimum, not a measured peak"),
    92: ("skip", "", {}, "vendor minimum, not a measured peak"),
    93: ("skip", "", {}, "vendor minimum, not a measured peak"),
    94: ("skip", "", {}, "vendor minimum, not a measured peak"),
    95: ("skip", "", {}, "vendor minimum, not a measured peak"),
    96: ("skip", "", {}, "vendor minimum, not a measured peak"),
    97: ("skip", "", {}, "vendor minimum, not a measured peak"),
    98: ("report", "smi", dict(task="inference", model="llama-2-7b", weight_precision="fp16", batch=1, seq_len=128, new_tokens=128),
         "context not stated: a short chat assumed"),
    99: ("report", "smi", dict(task="inference", model="llama-2-7b", weight_precision="int8", batch=1, seq_len=128, new_tokens=128),
         "context not stated: a short chat assumed"),
    100: ("report", "smi", dict(_BERT, batch=4), "classifier"),
    101: ("report", "smi", dict(_BERT, batch=1, grad_accum=4), "classifier"),
    102: ("report", "smi", dict(_BERT, batch=1, grad_accum=4, grad_ckpt=True), "classifier"),
    103: ("report", "smi", dict(_BERT_AMP, batch=4), "classifier"),
    104: ("report", "smi", dict(_BERT_AMP, batch=1, grad_accum=4, grad_ckpt=True), "classifier"),
    105: ("report", "smi", dict(_BERT, batch=4, optimizer="adafactor"), "classifier"),
    106: ("report", "smi", dict(_BERT_AMP, batch=1, grad_accum=4, grad_ckpt=True, optimizer="adafactor"), "classifier"),
    107: ("report", "smi", dict(_BERT, batch=4, optimizer="adamw-8bit"), "classifier"),
    108: ("report", "smi", dict(_BERT_AMP, batch=1, grad_accum=4, grad_ckpt=True, optimizer="adamw-8bit"), "classifier"),
    109: ("report", "reserved", dict(_AAI_Q, batch=1, seq_len=512), "FSDP, per GPU"),
    110: ("report", "reserved", dict(_AAI_Q, batch=1, seq_len=2048), "FSDP, per GPU"),
    111: ("report", "reserved", dict(_AAI_L, batch=1, seq_len=512), "FSDP, per GPU"),
    112: ("report", "reserved", dict(_AAI_L, batch=1, seq_len=2048), "FSDP, per GPU"),
    113: ("report", "alloc", dict(_AAI_L, batch=1, seq_len=512), "FSDP, per GPU"),
    114: ("report", "alloc", dict(_AAI_L, batch=1, seq_len=2048), "FSDP, per GPU"),
    115: ("report", "reserved", dict(_AAI_Q, batch=4, seq_len=2048), "FSDP, per GPU"),
    116: ("report", "reserved", dict(_AAI_Q, batch=10, seq_len=2048), "FSDP, per GPU"),
    117: ("report", "reserved", dict(_AAI_L, batch=4, seq_len=2048), "FSDP, per GPU"),
    118: ("report", "reserved", dict(_AAI_L, batch=6, seq_len=2048), "FSDP, per GPU"),
    119: ("report", "reserved", dict(_AAI_Q, batch=8, seq_len=2048, distributed="ddp"), "FSDP no_shard estimated as data parallel"),
    120: ("report", "reserved", dict(_AAI_L, batch=4, seq_len=2048, distributed="ddp"), "FSDP no_shard estimated as data parallel"),
    121: ("report", "reserved", dict(_AAI_Q, model=_YI_34B, batch=2, seq_len=2048), "FSDP, per GPU"),
}

# What a row's source states about its own setup that the query cannot say (taken from the source, never fitted):
#   context_gib  the CUDA context + kernels the source measured before loading the model (replaces ours in "smi")
#   no_logits    a classification head: no vocabulary logits, so the estimator's (masked-LM) logits/loss term is taken off
ADJUST: dict[int, dict[str, Any]] = {i: {"context_gib": 1343 / 1024, "no_logits": True} for i in range(100, 109)}

_CARD_GIB = {"A100-SXM4-40GB": 40.0, "A100 40GB": 40.0, "A100-SXM4-80GB": 80.0, "A100 80GB": 80.0, "A6000 48GB": 48.0,
             "RTX 3090 24GB": 24.0}


def measured_gib(row: dict[str, str]) -> float:
    """The row's measurement converted to GiB according to its unit note."""
    value = float(row["measured_gb"])
    notes = row["notes"]
    unit = re.search(r"unit=([A-Za-z?]+)", notes)
    unit = unit.group(1) if unit else "GB"
    if unit == "MiB":
        return value / 1024
    if unit == "MB":
        return value * 1e6 / GIB
    if unit == "GiB" or "appears to be GiB" in notes or "computed as GiB" in notes:
        return value
    return value * 1e9 / GIB  # GB = 1e9 bytes


def category(query: dict[str, Any]) -> str:
    return {"inference": "inference", "lora": "LoRA", "qlora": "QLoRA", "full": "full"}[query["task"]]


def ours(query: MemoryQuery, metric: str, adjust: dict[str, Any] | None = None) -> float:
    """Our number on the row's metric, in GiB (with the row's ADJUST)."""
    adjust = adjust or {}
    parts, *_ = estimate_by_key(query_key(query))
    if adjust.get("no_logits"):
        parts = {k: v for k, v in parts.items() if k != "logits/loss"}
    alloc = sum(parts.values()) / GIB
    frag = fragmentation(parts) / GIB
    est = estimate(query)
    if metric == "alloc":
        return alloc
    if metric == "reserved":
        return alloc + frag
    context = adjust.get("context_gib", est.total_gib - est.allocated_gib - fragmentation(estimate_by_key(query_key(query))[0]) / GIB)
    return alloc + frag + context  # smi and capacity: + CUDA context (and paged state, which est.total_gib holds)


def accelerate_rule(query: MemoryQuery, params: int) -> float:
    """accelerate's estimate-memory rules: weights x dtype bytes; x1.2 inference; x4 (Adam) for training."""
    wp = query.weight_precision
    if wp == "auto":
        wp = {"qlora": "nf4", "lora": "bf16", "full": "fp32", "inference": "bf16"}[query.task]
    if query.task == "full" and wp in ("int8", "nf4", "fp4"):
        wp = "fp32"
    bytes_per = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "nf4": 0.5, "fp4": 0.5}[wp]
    weights = params * bytes_per / GIB
    return weights * 1.2 if query.task == "inference" else weights * 4


# Sources that publish the same harness's numbers count as one source (left out together).
_SAME_SOURCE = {"huggingface.co/blog/overview-quantization-transformers": "github:huggingface/optimum"}


def _source_key(source: str) -> str:
    """The publisher of a row: github:owner/repo, or host/first-path-part for a web page."""
    m = re.match(r"(github:[^/\s]+/[^\s]+)", source)
    if m:
        key = m.group(1)
    else:
        m = re.match(r"https?://(?:www\.)?([^/\s]+)/([^/\s]+)(?:/([^/\s()]+))?", source)
        key = "/".join(p for p in m.groups() if p) if m else source
        if key.startswith("github.com/"):
            key = "github:" + "/".join(key.split("/")[1:3])
    return _SAME_SOURCE.get(key, key)


def q_of(qd: dict[str, Any]) -> MemoryQuery:
    return MemoryQuery(**qd)


class Predictor:
    """ours(query, metric) under a given set of calibrated coefficients (memory.CAL swapped in, the estimate cache
    cleared only when the coefficients change)."""

    def __init__(self) -> None:
        self.current: tuple | None = None

    def __call__(self, rec: dict[str, Any], coefs: dict[str, float]) -> float:
        key = tuple(sorted(coefs.items()))
        if key != self.current:
            memory.CAL.update(coefs)
            estimate_by_key.cache_clear()
            self.current = key
        return ours(rec["query"], rec["metric"], ADJUST.get(rec["row"]))


def cross_validate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """In-sample (fit on every row) and leave-one-source-out errors of the fitted coefficients; the committed
    coefficients are restored afterwards. Adds ins_err and loso_err to every scored record."""
    scored = [r for r in records if r["split"] != "skip"]
    committed = {k: memory.CAL[k] for k in accuracy.FITTED}
    predict = Predictor()

    def fit(rows: list[dict[str, Any]]) -> dict[str, float]:
        return accuracy.fit_coefficients(rows, predict, committed)

    try:
        everything = fit(scored)
        for r in scored:
            r["ins_err"] = (predict(r, everything) - r["measured"]) / r["measured"]
        loso = accuracy.leave_one_source_out(scored, fit, predict)
        for r, e in zip(scored, loso, strict=True):
            r["loso_err"] = e
    finally:
        memory.CAL.update(committed)
        estimate_by_key.cache_clear()
    return {"committed": committed, "fit_on_all": everything}


EXTRA_BASE = 10_000  # row numbers of --extra rows start here (ROWS and ADJUST key the published rows from 0)


def extra_rows(paths: list[Path]) -> dict[int, tuple[str, str, dict[str, Any], str]]:
    """ROWS entries for rows measured by this project (bench/gpu_kit/grid.py's grid.csv): each carries its estimator
    query in its notes after `query=` and is scored on its metric (allocated); rows without a measurement are skipped."""
    out: dict[int, tuple[str, str, dict[str, Any], str]] = {}
    i = EXTRA_BASE
    for path in paths:
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row.get("measured_gb") and "query=" in row.get("notes", ""):
                    out[i] = ("report", "alloc", json.loads(row["notes"].split("query=", 1)[1]), "this project's GPU grid")
                else:
                    out[i] = ("skip", "", {}, "no measurement")
                i += 1
    return out


def run(csv_path: Path, extra: list[Path] | None = None) -> list[dict[str, Any]]:
    with open(csv_path, newline="", encoding="utf-8") as fh:
        rows = list(enumerate(csv.DictReader(fh)))
    mapping = dict(ROWS)
    if extra:
        mapping.update(extra_rows(extra))
        i = EXTRA_BASE
        for path in extra:
            with open(path, newline="", encoding="utf-8") as fh:
                for row in csv.DictReader(fh):
                    rows.append((i, row))
                    i += 1
    out = []
    for i, row in rows:
        split, metric, qd, note = mapping.get(i, ("skip", "", {}, "not mapped"))
        rec: dict[str, Any] = {"row": i, "model": row["model"], "method": row["method"], "split": split, "metric": metric, "note": note,
                               "source": _source_key(row["source"]), "query": q_of(qd) if split != "skip" else None}
        if split != "skip":
            q = MemoryQuery(**qd)
            meas = measured_gib(row)
            pred = ours(q, metric, ADJUST.get(i))
            est = estimate(q)
            base = accelerate_rule(q, est.params)
            if metric == "capacity":
                meas = measured_gib(row)  # the card's size is the measurement
            rec.update(category=category(qd), measured_gib=meas, measured=meas, ours_gib=pred, accelerate_gib=base,
                       ours_err=(pred - meas) / meas, accelerate_err=(base - meas) / meas, gpu=row["gpu"])
        out.append(rec)
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vals = sorted(values)
    k = (len(vals) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def fits_accuracy(records: list[dict[str, Any]], key: str) -> tuple[int, int]:
    """Agreement of 'fits' decisions with the measurement over every (report row, GPU tier)."""
    agree = total = 0
    for r in records:
        for t in hardware_tiers():
            if t.kind != "gpu":
                continue
            cap = t.usable_gib - (t.cuda_context_gib if r["metric"] in ("alloc", "reserved") else 0.0)
            truth = r["measured_gib"] <= cap
            pred = r[key] <= cap
            agree += truth == pred
            total += 1
    return agree, total


def table(records: list[dict[str, Any]]) -> str:
    """Per category: committed coefficients on every row, refitted in-sample, and leave-one-source-out."""
    head = (f"{'category':10s} {'rows':>4s} {'srcs':>4s} | {'committed':>9s} {'p90':>6s} | {'in-sample':>9s} {'p90':>6s} | "
            f"{'LOSO med':>8s} {'p90':>6s} | {'accel med':>9s} {'p90':>6s} | {'fits/OOM':>8s} {'accel':>6s}")
    lines = [head]
    sel = [r for r in records if r["split"] != "skip"]
    for cat in (*accuracy.CATEGORIES, "all"):
        rs = [r for r in sel if cat == "all" or r["category"] == cat]
        if not rs:
            lines.append(f"{cat:10s} {0:>4d} | (no rows)")
            continue

        def stats(key: str, rs: list[dict[str, Any]] = rs) -> str:
            v = [abs(r[key]) * 100 for r in rs if key in r]
            return f"{statistics.median(v):>8.1f}% {_pct(v, 0.9):>5.1f}%" if v else f"{'-':>9s} {'-':>6s}"

        fo, ft = fits_accuracy(rs, "ours_gib")
        fa, _ = fits_accuracy(rs, "accelerate_gib")
        n_src = len({r["source"] for r in rs})
        lines.append(f"{cat:10s} {len(rs):>4d} {n_src:>4d} | {stats('ours_err')} | {stats('ins_err')} | {stats('loso_err')} | "
                     f"{stats('accelerate_err')} | {100 * fo / ft:>7.1f}% {100 * fa / ft:>5.1f}%")
    return "\n".join(lines)


def source_lines(records: list[dict[str, Any]]) -> str:
    """LOSO error per source: how each publication is predicted by coefficients fitted without it."""
    lines = [f"{'source':60s} {'rows':>4s} {'LOSO median':>11s} {'worst':>7s}"]
    sel = [r for r in records if "loso_err" in r]
    for src in dict.fromkeys(r["source"] for r in sel):
        e = [r["loso_err"] * 100 for r in sel if r["source"] == src]
        worst = max(e, key=abs)
        lines.append(f"{src[:60]:60s} {len(e):>4d} {statistics.median(abs(x) for x in e):>10.1f}% {worst:>+6.1f}%")
    return "\n".join(lines)


def _multi(q: MemoryQuery) -> bool:
    return q.distributed != "none" and q.gpus > 1


def subset_lines(records: list[dict[str, Any]]) -> str:
    """LOSO median per training category split by checkpointing and by one GPU / several (what the bands use)."""
    sel = [r for r in records if "loso_err" in r and r["category"] != "inference"]
    lines = [f"{'subset':32s} {'rows':>4s} {'srcs':>4s} {'LOSO med':>8s} {'p90':>6s}"]
    for c in accuracy.CATEGORIES[1:]:
        for ckpt in (True, False):
            for multi in (False, True):
                rs = [r for r in sel if r["category"] == c and r["query"].grad_ckpt == ckpt and _multi(r["query"]) == multi]
                if rs:
                    v = [abs(r["loso_err"]) * 100 for r in rs]
                    lines.append(f"{accuracy.subset_name(c, ckpt, multi):32s} {len(rs):>4d} {len({r['source'] for r in rs}):>4d} "
                                 f"{statistics.median(v):>7.1f}% {_pct(v, 0.9):>5.1f}%")
    return "\n".join(lines)


def bands_yaml(records: list[dict[str, Any]], fits: dict[str, Any]) -> str:
    """presets/estimator_accuracy.yaml: the LOSO error per category and per measured configuration."""
    import yaml

    sel = [r for r in records if "loso_err" in r]
    cats = {c: accuracy.error_summary([r["loso_err"] for r in sel if r["category"] == c]) for c in accuracy.CATEGORIES}
    subsets = {}
    for c in accuracy.CATEGORIES[1:]:  # training jobs, with and without gradient checkpointing, on one GPU or several
        for ckpt in (True, False):
            for multi in (False, True):
                rs = [r for r in sel if r["category"] == c and r["query"].grad_ckpt == ckpt and _multi(r["query"]) == multi]
                if rs:
                    subsets[accuracy.subset_name(c, ckpt, multi)] = {**accuracy.error_summary([r["loso_err"] for r in rs]),
                                                                     "sources": len({r["source"] for r in rs})}
    rows = [{"model": r["model"], "category": r["category"], "batch": r["query"].batch, "seq_len": r["query"].seq_len,
             "grad_ckpt": bool(r["query"].grad_ckpt), "multi_gpu": _multi(r["query"]), "metric": r["metric"], "loso_err": round(r["loso_err"], 4), "source": r["source"]}
            for r in sel]
    data = {"categories": cats, "subsets": subsets, "fitted_on_all_sources": {k: float(v) for k, v in fits["fit_on_all"].items()}, "rows": rows}
    header = ("# Written by `python bench/memory_accuracy.py --write-bands`; do not edit by hand.\n"
              "# Leave-one-source-out (LOSO) error of the memory estimator on the published measurements of\n"
              "# bench/data/memory_calibration.csv: for each source, the calibrated coefficients are refitted on all other\n"
              "# sources and the left-out rows are scored. err = (predicted - measured) / measured. Per category: n rows,\n"
              "# median and p90 of |err|, and q10/q90 of the signed error, which give every estimate its 80% band\n"
              "# (engine/estimator/accuracy.py). rows: the same error per measured configuration (the nearest-configuration\n"
              "# widening of the band).\n")
    return header + yaml.safe_dump(data, sort_keys=False, width=200)


def row_lines(records: list[dict[str, Any]]) -> str:
    lines = [f"{'row':>3s} {'split':6s} {'cat':9s} {'model':38s} {'metric':8s} {'measured':>8s} {'ours':>7s} {'err':>7s} {'accel':>7s} {'err':>7s} {'LOSO':>7s}  note"]
    for r in records:
        if r["split"] == "skip":
            lines.append(f"{r['row']:>3d} skip   {'':9s} {r['model'][:38]:38s} {'':8s} {'':>8s} {'':>7s} {'':>7s} {'':>7s} {'':>7s}  {r['note']}")
            continue
        lines.append(f"{r['row']:>3d} {r['split']:6s} {r['category']:9s} {r['model'][:38]:38s} {r['metric']:8s} {r['measured_gib']:8.2f} {r['ours_gib']:7.2f}"
                     f" {100 * r['ours_err']:+6.1f}% {r['accelerate_gib']:7.2f} {100 * r['accelerate_err']:+6.1f}% {100 * r.get('loso_err', float('nan')):+6.1f}%  {r['note']}")
    return "\n".join(lines)


def _outcome_model(name: str) -> str:
    arch = _LLAMA1.get(name)
    if arch is None:
        return name
    return f"manual:L={arch['L']},h={arch['h']},a={arch['a']},kv={arch['a']},i={arch['i']},v=32000,tied=0"


def outcomes(path: Path = OUTCOMES_CSV) -> list[dict[str, Any]]:
    """The verdict on every published fits/OOM outcome: right when "fits" meets "fits" and "no" meets "oom" (strict),
    and when "tight" is read as "will probably run" (lenient). The query column is a MemoryQuery as JSON."""
    from engine.estimator.catalog import tier_by_name

    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for row in rows:
        qd = json.loads(row["query"])
        qd["model"] = _LIT_PHI if qd["model"] == "litgpt-phi-1_5" else _outcome_model(qd["model"])
        verdict = memory.tier_verdict(MemoryQuery(**qd), tier_by_name(row["card"]))
        strict = (verdict == "fits") if row["outcome"] == "fits" else (verdict == "no")
        lenient = (verdict != "no") if row["outcome"] == "fits" else (verdict == "no")
        out.append({"model": row["model"], "card": row["card"], "outcome": row["outcome"], "verdict": verdict, "strict": strict,
                    "lenient": lenient, "source": _source_key(row["source"].split(";")[0].strip())})
    return out


def outcome_lines(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'model':28s} {'card':10s} {'published':>9s} {'verdict':>8s}  source"]
    for r in rows:
        lines.append(f"{r['model'][:28]:28s} {r['card']:10s} {r['outcome']:>9s} {r['verdict']:>8s}  {r['source'][:70]}")
    n = len(rows)
    lines.append(f"verdict right: {sum(r['strict'] for r in rows)}/{n} strict (fits=fits, no=oom), "
                 f"{sum(r['lenient'] for r in rows)}/{n} reading tight as 'will probably run'")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="calibration CSV to read (default: bench/data/memory_calibration.csv)")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--json", action="store_true", help="print the per-row records as JSON")
    ap.add_argument("--write-bands", action="store_true", help=f"write the LOSO errors to {accuracy.ACCURACY_FILE.relative_to(ROOT)}")
    ap.add_argument("--simulate", action="store_true", help="compare activations with a fake-tensor trace (CPU, needs peft)")
    ap.add_argument("--simulate-peak", action="store_true", help="compare whole-step peaks with a fake-tensor trace (CPU, needs peft)")
    ap.add_argument("--extra", type=Path, action="append", default=[],
                    help="also score rows this project measured (bench/gpu_kit/grid.py's grid.csv: the calibration columns, the "
                         "estimator query in the notes); the table is printed without them, then with them as a source of their own")
    args = ap.parse_args(argv)
    if args.simulate:
        return simulate_main()
    if args.simulate_peak:
        return simulate_peak_main()
    if args.extra and not args.json:
        without = run(args.csv)
        cross_validate(without)
        print("Without the rows of --extra:")
        print(table(without))
        print(f"\nWith the rows of --extra ({', '.join(str(p) for p in args.extra)}) as a source of their own:")
    records = run(args.csv, args.extra)
    fits = cross_validate(records)
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "query"} for r in records], indent=1))
        return 0
    print("Absolute % error of the peak per category. committed = the coefficients in memory.CAL on every row;")
    print("in-sample = refitted on every row and scored on the same rows; LOSO = leave-one-source-out (refitted without")
    print("the row's source, then scored on it): the honest figure. accel = accelerate's rules. fits/OOM: agreement of")
    print("'fits' with the measurement over the GPU tiers (committed coefficients).")
    print(table(records))
    print("\nLeave-one-source-out error per training subset (with/without checkpointing, one GPU/several)")
    print(subset_lines(records))
    print("\nLeave-one-source-out error per source")
    print(source_lines(records))
    print("\nFitted coefficients: committed " + ", ".join(f"{k}={v:g}" for k, v in fits["committed"].items()))
    print("                     on all rows " + ", ".join(f"{k}={v:g}" for k, v in fits["fit_on_all"].items()))
    n_skip = sum(r["split"] == "skip" for r in records)
    print(f"\n{n_skip} rows skipped (see --rows for why).")
    print(f"\nPublished fits/OOM outcomes ({OUTCOMES_CSV.relative_to(ROOT)}), verdict with the committed coefficients")
    print(outcome_lines(outcomes()))
    print("\nSources: " + "; ".join(dict.fromkeys(r["source"] for r in records if r["split"] != "skip")))
    if args.write_bands:
        accuracy.ACCURACY_FILE.write_text(bands_yaml(records, fits), encoding="utf-8")
        print(f"wrote {accuracy.ACCURACY_FILE.relative_to(ROOT)}")
    if args.rows:
        print()
        print(row_lines(records))
    return 0


# --------------------------------------------------------------------------------------------------
# --simulate: the activation model against a fake-tensor trace of the real code (CPU, no allocation)
# --------------------------------------------------------------------------------------------------

SIM_CASES = [
    # (label, model, query overrides)
    ("llama-2-7b LoRA q,v amp", "llama-2-7b", dict(task="lora", weight_precision="bf16", lora_targets="q,v", lora_dropout=0.0)),
    ("llama-2-7b LoRA all amp", "llama-2-7b", dict(task="lora", weight_precision="bf16", lora_targets="all-linear", lora_dropout=0.0)),
    ("llama-2-7b LoRA all pure-bf16", "llama-2-7b", dict(task="lora", weight_precision="bf16", training_precision="pure-bf16", lora_targets="all-linear", lora_dropout=0.0)),
    ("llama-2-7b QLoRA all amp", "llama-2-7b", dict(task="qlora", lora_targets="all-linear", lora_dropout=0.0)),
    ("llama-2-7b QLoRA all amp ckpt", "llama-2-7b", dict(task="qlora", lora_targets="all-linear", lora_dropout=0.0, grad_ckpt=True)),
    ("llama-2-7b full pure-bf16", "llama-2-7b", dict(task="full", weight_precision="bf16", training_precision="pure-bf16")),
    ("llama-2-7b full amp (fp32 master)", "llama-2-7b", dict(task="full", weight_precision="fp32")),
    ("llama-2-7b LoRA q,v eager", "llama-2-7b", dict(task="lora", weight_precision="bf16", lora_targets="q,v", lora_dropout=0.0, attention="eager")),
    ("qwen2.5-0.5b LoRA all amp", "qwen2.5-0.5b", dict(task="lora", weight_precision="bf16", lora_targets="all-linear", lora_dropout=0.0)),
    ("phi-3-mini LoRA all amp", "phi-3-mini", dict(task="lora", weight_precision="bf16", lora_targets="all-linear", lora_dropout=0.0)),
    ("gemma-2-2b LoRA all amp (eager)", "gemma-2-2b", dict(task="lora", weight_precision="bf16", lora_targets="all-linear", lora_dropout=0.0, attention="eager")),
    ("gpt2-medium LoRA c_attn pure-bf16", "gpt2-medium", dict(task="lora", weight_precision="bf16", training_precision="pure-bf16", lora_targets="q", lora_dropout=0.0)),
    ("pythia-410m LoRA qkv pure-bf16", "pythia-410m", dict(task="lora", weight_precision="bf16", training_precision="pure-bf16", lora_targets="q", lora_dropout=0.0)),
    ("phi-1.5 full pure-bf16", "phi-1.5", dict(task="full", weight_precision="bf16", training_precision="pure-bf16")),
]


def _sim_peak(cfg: Any, layers: int, q: MemoryQuery) -> dict[str, float]:
    """Forward+backward+step of the real HF/peft code on fake CPU tensors; live-memory peaks in bytes."""
    import types

    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
    from transformers import AutoModelForCausalLM

    class Tracker(MemTracker):  # MemTracker assumes every parameter trains; LoRA freezes most
        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            pm, bm = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
            for prm in module.parameters():
                if prm.requires_grad and self._param_to_grad_hook_handles.get(prm) is None:
                    def hook(pp, self=self):
                        self._update_and_maybe_create_winfos(pp.grad, _MemRefType.GRAD)
                    h = prm.register_post_accumulate_grad_hook(hook)
                    self._param_to_grad_hook_handles[prm] = (h, h)
            return pm, bm

    def fake4bit_forward(self, x):  # bitsandbytes Linear4bit: compute in bf16, cast back to the input dtype
        with torch.autocast("cpu", enabled=False):
            out = F.linear(x.to(torch.bfloat16), self.weight)
        return out.to(x.dtype)

    cfg = cfg.__class__.from_dict(cfg.to_dict())
    for name in ("num_hidden_layers", "n_layer"):
        if hasattr(cfg, name):
            setattr(cfg, name, layers)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:layers]
    for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout", "attention_dropout"):
        if hasattr(cfg, name):
            setattr(cfg, name, 0.0)
    quant = q.task == "qlora"
    full_amp = q.task == "full" and q.weight_precision == "fp32"
    dtype = torch.float32 if full_amp else torch.bfloat16
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=q.attention)
    if q.task != "full":
        model.requires_grad_(False)
        if quant:
            for name, m in model.named_modules():
                if isinstance(m, torch.nn.Linear) and "lm_head" not in name:
                    m.forward = types.MethodType(fake4bit_forward, m)
                    m._q4 = True
            for name, prm in model.named_parameters():  # prepare_model_for_kbit_training
                owner = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
                if not getattr(owner, "_q4", False):
                    prm.data = prm.data.to(torch.float32)
        from peft import LoraConfig, get_peft_model

        mods, head = resolve_arch(q.model).lora_modules(q.lora_targets)
        targets = sorted({m.leaf for m in mods} | ({"lm_head"} if head else set()))
        model = get_peft_model(model, LoraConfig(r=q.lora_r, lora_alpha=2 * q.lora_r, lora_dropout=q.lora_dropout, target_modules=targets),
                               autocast_adapter_dtype=q.training_precision != "pure-bf16")
    fm = FakeTensorMode(allow_non_fake_inputs=True)
    memo: dict[int, Any] = {}
    with fm:  # give every meta parameter a fake CPU tensor (swapping parameters of fake tensors is not allowed)
        for m in model.modules():
            for n, prm in list(m._parameters.items()):
                if prm is not None:
                    memo.setdefault(id(prm), torch.nn.Parameter(torch.empty(prm.shape, dtype=prm.dtype), requires_grad=prm.requires_grad))
                    m._parameters[n] = memo[id(prm)]
            for n, buf in list(m._buffers.items()):
                if buf is not None:
                    memo.setdefault(id(buf), torch.ones(buf.shape, dtype=buf.dtype))
                    m._buffers[n] = memo[id(buf)]
        if q.grad_ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if q.task != "full":
                model.enable_input_require_grads()
        model.train()
        params = [prm for prm in model.parameters() if prm.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)  # as engine/training/run.py runs it
        mt = Tracker()
        mt.track_external(model, opt)
        ids = torch.randint(0, cfg.vocab_size, (q.batch, q.seq_len))
        amp = q.training_precision != "pure-bf16"
        with mt:
            for _ in range(2):  # the second step has optimizer state, like every later one
                mt.reset_mod_stats()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                    loss = model(input_ids=ids, labels=ids).loss
                after_fwd = mt.get_tracker_snapshot()
                loss.backward()
                del loss
                opt.step()
                opt.zero_grad(set_to_none=True)
        peak = mt.get_tracker_snapshot("peak")
    dev = next(iter(peak))
    return {"peak": float(peak[dev]["Total"]), "act": float(after_fwd[dev].get(_MemRefType.ACT, 0))}


def resolve_arch(ref: str):
    from engine.estimator.model_config import resolve

    return resolve(ref)


def simulate_main() -> int:
    """Per-layer activations: our formula (frozen inputs not kept, as torch 2.13 does) vs the fake-tensor trace."""
    import warnings

    import transformers

    from engine.estimator import memory
    from engine.estimator.architecture import analyze
    from engine.estimator.catalog import catalog_lookup
    from engine.estimator.model_config import config_from_dict

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    saved = {k: memory.CAL[k] for k in ("frozen_input_saved", "quantized_input_saved")}
    memory.CAL.update(frozen_input_saved=0.0, quantized_input_saved=0.0)  # what torch 2.13 + bnb 0.50 do (the trace)
    print("CPU fake-tensor trace vs estimator, per decoder layer and token (bytes), batch 1, seq 512, no dropout.")
    print("The trace runs CPU kernels: LayerNorm under autocast and dropout masks differ from CUDA; the cases avoid both.")
    print(f"{'case':36s} {'trace':>9s} {'ours':>9s} {'err':>7s}")
    errs = []
    try:
        for label, model, over in SIM_CASES:
            q = MemoryQuery(model=model, batch=1, seq_len=512, **over)
            entry = catalog_lookup(model)
            cfg = config_from_dict(dict(entry.config), where=model)
            acts = []
            for layers in (1, 2):
                acts.append(_sim_peak(cfg, layers, q)["act"])
            traced = acts[1] - acts[0]
            arch1 = analyze(config_from_dict({**entry.config, **_layers_key(entry.config, 1)}, where=model), ref=model, label=model, source="")
            arch2 = analyze(config_from_dict({**entry.config, **_layers_key(entry.config, 2)}, where=model), ref=model, label=model, source="")
            ours = _act_bytes(q, arch2) - _act_bytes(q, arch1)
            err = (ours - traced) / traced
            errs.append(abs(err))
            print(f"{label:36s} {traced / 512:9.0f} {ours / 512:9.0f} {100 * err:+6.1f}%", flush=True)
    finally:
        memory.CAL.update(saved)
    print(f"median |error| {100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}%")
    return 0


PEAK_CASES = [
    ("llama-2-7b", dict(task="qlora", lora_targets="all-linear", grad_ckpt=True, batch=1, seq_len=512)),
    ("llama-2-7b", dict(task="qlora", lora_targets="all-linear", grad_ckpt=False, batch=1, seq_len=512)),
    ("llama-2-7b", dict(task="lora", weight_precision="bf16", lora_targets="all-linear", grad_ckpt=True, batch=2, seq_len=512)),
    ("llama-3.1-8b", dict(task="qlora", lora_targets="all-linear", grad_ckpt=True, batch=1, seq_len=512)),
    ("llama-3.1-8b", dict(task="qlora", lora_targets="all-linear", grad_ckpt=False, batch=2, seq_len=512)),
]


def simulate_peak_main() -> int:
    """The whole training step's peak (weights, adapters, optimizer, activations, loss, lm_head copies ...) of a
    2-layer cut of real models: the fake-tensor trace of the real transformers/peft code vs the estimator. The trace's
    4-bit layers are bf16 stand-ins, so our quantized weights are swapped for bf16 ones and the dequantization
    buffer (which the stand-in does not need) is left out."""
    import warnings

    import transformers

    from engine.estimator import memory
    from engine.estimator.architecture import analyze
    from engine.estimator.catalog import catalog_lookup
    from engine.estimator.model_config import config_from_dict

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    saved = {k: memory.CAL[k] for k in ("frozen_input_saved", "quantized_input_saved")}
    memory.CAL.update(frozen_input_saved=0.0, quantized_input_saved=0.0)  # what torch 2.13 + bnb 0.50 do (the trace)
    memory.estimate_by_key.cache_clear()
    print("Whole-step peak, 2-layer cut, fused AdamW, no dropout, amp-bf16 (GiB): CPU fake-tensor trace vs estimator")
    print(f"{'case':52s} {'trace':>7s} {'ours':>7s} {'err':>7s}")
    try:
        for model, over in PEAK_CASES:
            q = MemoryQuery(model=model, optimizer="adamw", lora_dropout=0.0, **over)
            entry = catalog_lookup(model)
            traced = _sim_peak(config_from_dict(dict(entry.config), where=model), 2, q)["peak"]
            arch = analyze(config_from_dict({**entry.config, **_layers_key(entry.config, 2)}, where=model), ref=model, label=model, source="")
            parts, _phase, _paged, _n, _notes, details = memory._estimate_bytes(q, arch)
            ours = sum(parts.values())
            if q.task == "qlora":  # the stand-in keeps bf16 linear weights and needs no dequantized copy
                ours += 2 * arch.params_layer_linear - parts["weights"] - parts["quantization constants"] + 4 * (arch.params_total - arch.params_layer_linear)
                ours -= sum(v for k, v in details.items() if k.startswith("dequantized"))
            label = f"{model} {q.task} b{q.batch} s{q.seq_len} {'ckpt' if q.grad_ckpt else 'no ckpt'}"
            print(f"{label:52s} {traced / GIB:7.3f} {ours / GIB:7.3f} {100 * (ours - traced) / traced:+6.1f}%", flush=True)
    finally:
        memory.CAL.update(saved)
        memory.estimate_by_key.cache_clear()
    return 0


def _layers_key(config: dict[str, Any], n: int) -> dict[str, Any]:
    return {"n_layer": n} if "n_layer" in config else {"num_hidden_layers": n}


def _act_bytes(q: MemoryQuery, arch: Any) -> float:
    """Activations kept at the end of the forward pass for this architecture (no loss terms)."""
    from engine.estimator import memory

    p = memory.precision_plan(q, arch)
    mods = arch.lora_modules(q.lora_targets)[0] if p.task == "lora" else []
    a_tok, a_seq = memory.layer_activations(arch, q, p, mods)
    per_layer = (a_tok + a_seq * q.seq_len) * q.batch * q.seq_len
    if q.grad_ckpt:
        per_layer = p.residual * arch.hidden * q.batch * q.seq_len
    stored = p.master if p.task == "full" else memory.FLOAT_BYTES.get(p.storage, p.c)
    if p.autocast and p.storage not in memory.QUANT_DTYPES and stored != p.c:
        per_layer += p.c * arch.params_layer_linear / arch.n_layers  # autocast's 16-bit weight copies (traced as activations)
    if p.autocast and p.task == "lora" and p.adapter != p.c and not q.grad_ckpt:
        per_layer += p.c * q.lora_r * sum(m.d_in + m.d_out for m in mods)  # autocast's copies of the fp32 adapters (idem)
    return arch.n_layers * per_layer


if __name__ == "__main__":
    raise SystemExit(main())
