"""What DPO, ORPO, KTO and GRPO add to a training step's memory, as lines of the estimate's breakdown.

The estimator (engine/estimator/memory.py) knows one model doing one supervised step. The preference and reward methods
change three things, each counted here from the same arithmetic:

- DPO and ORPO run the chosen and the rejected answer of every pair through the model in one pass (trl concatenates
  them): a supervised step of twice the micro batch.
- DPO compares with a frozen reference. A LoRA/QLoRA run keeps no second model (the reference is the starting model
  through a frozen copy of the adapter: the adapter's size again); a full run keeps a frozen copy of every weight
  (engine/training/preference.py). ORPO has no reference.
- KTO reads one answer per row (a supervised step of the micro batch), then, without gradients, each row's mismatched
  KL answer and the reference's view of both: no activations kept for them. Its reference is DPO's.
- GRPO first writes `num_generations` answers per prompt, micro batch x accumulation answers at once (trl's generation
  batch): their KV cache and logits, over prompt + answer tokens, while only the static memory (weights, adapters,
  optimizer state) is alive; then it trains on those sequences (prompt + answer long). The peak is the larger phase.

`estimate_objective` returns the MemoryEstimate with the lines "reference model" and "generations" (OBJECTIVE_TERMS) and
its totals adjusted; the hardware-tier verdicts are the supervised step's. `breakdown_rows` is memory.breakdown_rows with
those lines after the others, and `objective_line` the short text the fine-tune form's prediction adds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import MemoryQuery
from ..i18n import fmt_number
from . import memory
from .memory import GIB, MemoryEstimate, estimate
from .model_config import resolve
from .texts import Msg, term_name, term_what

STATIC = ("weights", "quantization constants", "trainable weights", "optimizer state")
OBJECTIVE_TERMS = ("reference model", "generations")  # lines of the breakdown only a DPO/ORPO/GRPO estimate has


def breakdown_rows(est: MemoryEstimate, lang: str = "en") -> list[list[Any]]:
    """memory.breakdown_rows (every term, zeros included), then the OBJECTIVE_TERMS the estimate has, in `lang`."""
    extra = [[term_name(t, lang), round(est.breakdown_gib[t], 3), term_what(t, lang)] for t in OBJECTIVE_TERMS if est.breakdown_gib.get(t)]
    return memory.breakdown_rows(est, lang) + extra


def objective_line(est: MemoryEstimate, lang: str = "en") -> str:
    """'reference model 0.01 GiB · generated answers 0.02 GiB': what the method adds, for the form's prediction ("" if nothing)."""
    return " · ".join(f"{term_name(t, lang)} {fmt_number(round(est.breakdown_gib[t], 3), lang, 3)} GiB" for t in OBJECTIVE_TERMS
                      if est.breakdown_gib.get(t))


def estimate_objective(q: MemoryQuery, method: str, *, num_generations: int = 8, completion_len: int = 16) -> MemoryEstimate:
    """The estimate of a `method` ("dpo" | "orpo" | "kto" | "grpo") step for the supervised query `q` of the same weights (its
    task: full, lora or qlora; batch = micro batch; seq_len = max_seq_len, the prompt's bound for GRPO)."""
    if method in ("dpo", "orpo"):
        return _pairs(q, method)
    if method == "kto":
        return _labelled(q)
    if method == "grpo":
        return _grpo(q, num_generations, completion_len)
    raise ValueError(f"not a preference or reward method: {method!r}")


def _with(est: MemoryEstimate, lines: dict[str, float], *, allocated: float, total: float, notes: list, phase: str | None = None,
          details: dict | None = None) -> MemoryEstimate:
    breakdown = {**est.breakdown_gib, **lines}
    return dataclasses.replace(est, breakdown_gib=breakdown, allocated_gib=allocated, total_gib=total, notes=[*est.notes, *notes],
                               phase=phase or est.phase, details_gib={**est.details_gib, **(details or {})})


def _pairs(q: MemoryQuery, method: str) -> MemoryEstimate:
    est = estimate(dataclasses.replace(q, batch=2 * q.batch))  # chosen + rejected in one pass
    est = dataclasses.replace(est, query=q, effective_batch=q.batch * q.grad_accum)
    notes = [Msg("estimator.note.pairs")]
    ref = 0.0
    if method == "dpo":
        # full: a frozen copy of the weights as loaded; LoRA/QLoRA: a frozen copy of the adapter only
        ref = _reference(est, q)
        notes.append(Msg("estimator.note.reference_full" if q.task == "full" else "estimator.note.reference_adapter"))
    return _with(est, {"reference model": ref}, allocated=est.allocated_gib + ref, total=est.total_gib + ref, notes=notes)


def _reference(est: MemoryEstimate, q: MemoryQuery) -> float:
    """DPO's and KTO's frozen reference: a copy of the weights as loaded (full), of the adapter only (LoRA/QLoRA)."""
    if q.task == "full":
        return est.breakdown_gib["weights"] + est.breakdown_gib["quantization constants"]
    return est.breakdown_gib["trainable weights"]


def _labelled(q: MemoryQuery) -> MemoryEstimate:
    est = estimate(q)  # one answer per row with gradients; the KL answers and the reference run without them
    ref = _reference(est, q)
    notes = [Msg("estimator.note.kto"), Msg("estimator.note.reference_full" if q.task == "full" else "estimator.note.reference_adapter")]
    return _with(est, {"reference model": ref}, allocated=est.allocated_gib + ref, total=est.total_gib + ref, notes=notes)


def _grpo(q: MemoryQuery, num_generations: int, completion_len: int) -> MemoryEstimate:
    est = estimate(dataclasses.replace(q, seq_len=q.seq_len + completion_len))  # training on prompt + answer
    answers = q.batch * q.grad_accum  # trl generates a whole generation batch (micro batch x steps per generation) at once
    gen = estimate(MemoryQuery(model=q.model, task="inference", weight_precision=q.weight_precision, double_quant=q.double_quant,
                               training_precision=q.training_precision, batch=answers, seq_len=q.seq_len, new_tokens=completion_len,
                               attention=q.attention))
    # The whole cache at the last answer token (the inference estimate's peak may be its prefill, with the prompt's only):
    # keys and values of every layer for every answer, prompt + answer tokens, in the compute dtype.
    arch = resolve(q.model)
    c = 4 if q.training_precision == "fp32" else 2
    kv = 2 * arch.n_layers * arch.kv_dim * c * answers * (q.seq_len + completion_len) / GIB
    logits = gen.breakdown_gib["logits/loss"]  # one decoding step's logits for every answer (and their fp32 softmax)
    working = gen.breakdown_gib["activations"] + gen.breakdown_gib["temporary buffers"]
    generations = kv + logits + working
    static = sum(est.breakdown_gib[t] for t in STATIC)
    details = {Msg("estimator.detail.generation_kv", answers=answers, tokens=q.seq_len + completion_len): kv,
               Msg("estimator.detail.generation_logits", answers=answers): logits}
    notes = [Msg("estimator.note.grpo", groups=max(1, answers // max(1, num_generations)), answers=answers, completion=completion_len)]
    if static + generations <= est.allocated_gib:  # the training step is the peak; the answers come before it, not beside it
        return _with(est, {"generations": generations}, allocated=est.allocated_gib, total=est.total_gib,
                     notes=[*notes, Msg("estimator.note.grpo_step_peak")], details=details)
    lines = {t: (est.breakdown_gib[t] if t in STATIC else 0.0) for t in est.breakdown_gib if t not in ("fragmentation", "CUDA context")}
    allocated = static + generations
    extra = est.breakdown_gib["fragmentation"] + est.breakdown_gib["CUDA context"]
    return _with(est, {**lines, "generations": generations}, allocated=allocated, total=allocated + extra, notes=notes,
                 phase="generating answers", details=details)
