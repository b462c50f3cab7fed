"""The precision plan of a memory query: which dtype (in bytes) every kind of tensor has, as transformers 5, peft
and bitsandbytes give them for the requested weight storage and training precision (AMP, pure bf16, fp32,
QLoRA's prepare_model_for_kbit_training upcasts). Used by engine/estimator/memory.py."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import MemoryQuery
from .architecture import Arch
from .texts import Msg

# --------------------------------------------------------------------------------------------------
# Precision plan: which dtype every kind of tensor has for this query
# --------------------------------------------------------------------------------------------------

FLOAT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}  # bytes per element of the float storage dtypes
QUANT_DTYPES = ("int8", "nf4", "fp4")  # bitsandbytes storage: linear weights quantized, the rest in 16 bits


@dataclass(frozen=True)
class PrecisionPlan:
    """The dtype (in bytes) of every kind of tensor of one query."""

    training: bool
    task: str  # inference | full | lora (lora covers QLoRA: adapters on a quantized base)
    storage: str  # fp32 | fp16 | bf16 | int8 | nf4 | fp4
    c: int  # compute bytes (matmul inputs/outputs)
    autocast: bool
    residual: int  # bytes of the residual stream
    nonquant: int  # bytes of embeddings/lm_head/norms/biases when the linear layers are quantized
    norm_out: int  # bytes of a norm's output
    inter: int  # bytes of the outputs of frozen linear layers (bitsandbytes casts back to the input dtype)
    adapter: int  # LoRA adapter dtype
    master: int  # trainable base weights (full fine-tuning)
    notes: tuple[str, ...]


def precision_plan(q: MemoryQuery, arch: Arch) -> PrecisionPlan:
    """Which dtype every kind of tensor has for this query, with a note wherever a requested precision was adjusted."""
    notes: list[str] = []
    training = q.task != "inference"
    tp = q.training_precision
    wp = q.weight_precision
    task = q.task
    if task == "full" and wp in QUANT_DTYPES:
        master = "bf16" if tp == "pure-bf16" else "fp32"
        notes.append(Msg("estimator.note.full_quantized", precision=wp, master=master))
        wp = "auto"
    if task == "qlora" and wp not in ("auto", *QUANT_DTYPES):
        notes.append(Msg("estimator.note.qlora_float", precision=wp))
    if wp == "auto":
        if task == "qlora":
            wp = "nf4"
        elif task == "full":
            wp = "bf16" if tp == "pure-bf16" else "fp32"
        elif tp == "fp32" and training:
            wp = "fp32"
        else:
            wp = "fp16" if tp == "amp-fp16" else "bf16"
    if training and tp == "pure-bf16" and wp in ("fp32", "fp16"):
        notes.append(Msg("estimator.note.pure_bf16"))
        wp = "bf16"
    quant = wp in QUANT_DTYPES
    if not training:
        c = 4 if wp == "fp32" else 2
        return PrecisionPlan(False, "inference", wp, c, False, c, 2, c, c, 4, c, tuple(notes))
    task = "full" if task == "full" else "lora"
    autocast = tp in ("amp-fp16", "amp-bf16")
    if quant:
        c = 4 if tp == "fp32" else 2
        # peft's prepare_model_for_kbit_training (used by train.py) casts embeddings, norms and lm_head to fp32,
        # so the residual stream, the norms' outputs and (bitsandbytes casting back) every linear output are fp32.
        nonquant = 2 if tp == "pure-bf16" else 4
        residual = nonquant
    else:
        wb = FLOAT_BYTES[wp]
        c = 2 if (autocast or wb == 2) else 4
        nonquant = wb
        residual = wb
    if arch.norm_type == "ln" and autocast:
        norm_out = 4  # CUDA autocast runs layer_norm in fp32
    else:
        norm_out = max(residual, nonquant)
    inter = norm_out if quant else c
    adapter = 2 if tp == "pure-bf16" else 4  # peft upcasts adapters to fp32 (autocast_adapter_dtype=True)
    master = FLOAT_BYTES.get(wp, 4)
    return PrecisionPlan(True, task, wp, c, autocast, residual, nonquant, norm_out, inter, adapter, master, tuple(notes))
