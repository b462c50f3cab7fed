"""The memory estimator: how much GPU memory a job needs, why, and what to change so it fits.

Pure arithmetic on the architecture of `engine/estimator/architecture.py` (exact parameter counts and per-layer linear
shapes from a meta-device build): no torch allocation, a few microseconds per estimate once the model is known.

The model of a training step is its peak over three phases, each a sum of physical terms (bytes):

  start of backward  static + gradients kept by accumulation + activations + max(logits/loss, layer backward)
  end of backward    static + all gradients (+ the tied-embedding gradient sum)
  optimizer step     static + all gradients + the optimizer's temporary (foreach AdamW: one state-sized copy)

with static = weights + quantization constants + trainable adapter weights + optimizer state. Inference is the
peak of the prefill (weights + KV cache of the prompt + the widest layer's working set) and of the last
decoding step (weights + full KV cache + one layer's cache being re-concatenated). What nvidia-smi shows adds
the allocator's unused reserve (fragmentation), the CUDA context and paged optimizer state while it is resident,
which `torch.cuda.max_memory_allocated()` never counts. Named components inside the terms (QLoRA's fixed costs, the
autocast copies, the loss, the optimizer step's temporary) are reported as `details_gib`.

Activations are counted per decoder layer and token, op by op, from what PyTorch's autograd keeps for backward
in the transformers 5 / peft / bitsandbytes code paths (RMSNorm keeps an fp32 copy of its input, SDPA keeps
q, k, v, out and the log-sum-exp, a SwiGLU MLP keeps gate, act(gate) and up, a LoRA adapter keeps its input in
the compute dtype, dropout keeps a 1-byte mask, ...). The terms were checked against a fake-tensor trace of the
real models (bench/memory_accuracy.py --simulate) and against published peak measurements
(bench/data/memory_calibration.csv; bench/memory_accuracy.py prints the accuracy table, leave-one-source-out;
docs/memory.md has the method and its limits). The few coefficients that are fitted rather than derived live in CAL
below; engine/estimator/accuracy.py fits them and gives every estimate its cross-validated band.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from ..config import MemoryQuery
from ..errors import ConfigError, EngineError
from ..fields import from_dict
from .accuracy import Band, band_for, category_of
from .architecture import Arch, LinearSpec
from .catalog import HardwareTier, catalog, hardware_tiers, tier_by_name
from .model_config import arch_from_manual, gate, resolve
from .paging import paged_out_gib, paging_seconds, residency_rows
from .precision import FLOAT_BYTES, QUANT_DTYPES, PrecisionPlan, precision_plan
from .sharding import Shares, per_gpu
from .texts import KeyedConfigError, Msg, change_msg, term_name, term_what, tier_msg

__all__ = [
    "MemoryEstimate", "Suggestion", "estimate", "hardware_tiers", "catalog", "model_choices", "max_batch", "max_seq_len",
    "make_it_fit", "breakdown_rows", "detail_rows", "residency_rows", "arch_from_manual", "query_from_json", "tier_verdict", "query_band",
    "paged_out_gib", "paging_seconds", "TERMS", "CAL",
]

GIB = 2**30

# Coefficients that are calibrated on published measurements rather than derived from the code paths.
# Each is a physical quantity; bench/memory_accuracy.py reports how well they do on rows not used to set them.
CAL: dict[str, float] = {
    # FITTED (engine/estimator/accuracy.py FITTED; `python bench/memory_accuracy.py` refits it on every source and
    # validates it leave-one-source-out). Share of the inputs of *frozen* linear layers that the measured runs kept
    # for backward. torch 2.13's autograd frees them for a plain frozen nn.Linear (our CPU trace), yet the published
    # LoRA rows without checkpointing grow by about this share of them per token. Errs on the safe side for our stack.
    "frozen_input_saved": 0.625,
    # NOT fitted: a mechanism with a known size. bitsandbytes before 0.43.2 stored every 4-bit layer's input in ctx
    # for a backward that never used it (bnb PR #1270, July 2024): one full copy, which every published QLoRA peak
    # measured before the fix includes. bitsandbytes 0.50 keeps none, so on our stack this over-estimates QLoRA
    # without checkpointing by one layer input per 4-bit layer (safe side); with checkpointing it is one layer's worth.
    "quantized_input_saved": 1.0,
    # Logits + cross-entropy peak in bytes per token per vocabulary entry (stock HF loss, upcast to fp32):
    # the saved fp32 log-softmax, its gradient and the gradient of the upcast coexist at the start of backward.
    "loss_bytes_per_vocab": 12.0,
    # FITTED. Caching-allocator reserve beyond the allocated peak (reserved - allocated, what nvidia-smi adds): a
    # share of the memory that comes and goes during the step (activations, logits, KV growth) and a little of the
    # static memory.
    "frag_dynamic": 0.15,
    "frag_static": 0.02,
    # FITTED. CUDA context used for MemoryEstimate.total_gib when no card is given (torch 2.x, CUDA 12, lazy module
    # loading); the verdict per card uses the card generation's own context (presets/hardware.yaml).
    "cuda_context_gib": 0.5,
}

# The terms of a breakdown; their names and one-line explanations for people are in presets/lang (estimator.term.*).
TERMS = (
    "weights", "quantization constants", "trainable weights", "gradients", "optimizer state", "activations",
    "logits/loss", "KV cache", "temporary buffers", "fragmentation", "CUDA context",
)


@dataclass
class MemoryEstimate:
    """The estimate for one query. GiB = 2**30 bytes."""

    query: MemoryQuery
    model: str
    params: int
    trainable_params: int
    breakdown_gib: dict[str, float]  # TERMS order; sums to total_gib (allocated = the terms above fragmentation, less paged state)
    allocated_gib: float  # torch.cuda.max_memory_allocated() at the peak
    total_gib: float  # what nvidia-smi shows: allocated + fragmentation + CUDA context + paged state while resident
    tiers: dict[str, str]  # tier name -> fits | tight | no
    notes: list[str] = field(default_factory=list)
    phase: str = ""  # the phase where the peak happens
    spillable_gib: float = 0.0  # paged optimizer state: in GPU memory when there is room, else in CPU RAM
    effective_batch: int = 1
    details_gib: dict[str, float] = field(default_factory=dict)  # named physical components inside the terms
    band: Band | None = None  # where the measured peak is expected (factors of the prediction), cross-validated
    paged_out_gib: dict[str, float] = field(default_factory=dict)  # tier -> paged state living in CPU RAM there (jobs that run)

    @property
    def resident_gib(self) -> float:
        """What must stay on the GPU (allocated + allocator reserve + CUDA context): what the verdict is based on."""
        return self.total_gib - self.spillable_gib

    @property
    def pageable_gib(self) -> float:
        """What may page out to CPU RAM: paged optimizer state (unified memory)."""
        return self.spillable_gib

    def range_gib(self, value: float, fixed: float = 0.0) -> tuple[float, float]:
        """The band around `value`; `fixed` (the CUDA context) is not scaled."""
        low, high = (self.band.low, self.band.high) if self.band is not None else (1.0, 1.0)
        return fixed + (value - fixed) * low, fixed + (value - fixed) * high

    def to_json(self) -> dict[str, Any]:
        """The CLI/JSONL result format."""
        return {
            "model": self.model,
            "allocated_gib": round(self.allocated_gib, 4),
            "total_gib": round(self.total_gib, 4),
            "breakdown_gib": {k: round(v, 4) for k, v in self.breakdown_gib.items()},
            "params": self.params,
            "trainable_params": self.trainable_params,
            "tiers": dict(self.tiers),
            "peak_phase": self.phase,
            "spillable_gib": round(self.spillable_gib, 4),
            "resident_gib": round(self.resident_gib, 4),
            "pageable_gib": round(self.pageable_gib, 4),
            "paged_out_gib": {k: round(v, 4) for k, v in self.paged_out_gib.items() if v > 0},
            "effective_batch": self.effective_batch,
            "details_gib": {str(k): round(v, 4) for k, v in self.details_gib.items()},
            "band": None if self.band is None else {
                **self.band.to_json(),
                "allocated_gib": [round(v, 4) for v in self.range_gib(self.allocated_gib)],
                "total_gib": [round(v, 4) for v in self.range_gib(self.total_gib, self.breakdown_gib.get("CUDA context", 0.0))],
            },
            "notes": [str(n) for n in self.notes],
        }


@dataclass(frozen=True)
class Suggestion:
    """A change that brings a job under a card's usable memory."""

    description: str  # a texts.Msg: English as a str, rendered in any language by the views
    changes: dict[str, Any]  # MemoryQuery field -> new value
    new_total_gib: float
    cost: str  # what it costs in speed / quality (a texts.Msg too)
    rank: int  # 1 = cheapest
    verdict: str = "fits"


# --------------------------------------------------------------------------------------------------
# Terms
# --------------------------------------------------------------------------------------------------


def _weight_bytes(arch: Arch, p: PrecisionPlan, double_quant: bool) -> tuple[float, float]:
    """(weights, quantization constants) in bytes."""
    lin = arch.params_layer_linear
    rest = arch.params_total - lin
    if p.storage in ("nf4", "fp4"):
        # 4-bit: two weights per byte; absmax per block of 64: fp32, or 8-bit + fp32 per 256 blocks (double quant)
        consts = lin * ((1 / 64 + 4 / (64 * 256)) if double_quant else 4 / 64)
        return lin * 0.5 + rest * p.nonquant, consts
    if p.storage == "int8":
        rows = sum(s.d_out for s in arch.linears) * arch.n_layers
        return lin * 1.0 + rest * p.nonquant, rows * 4.0  # LLM.int8: int8 weights + one fp32 scale per output row
    wb = p.master if p.task == "full" else FLOAT_BYTES[p.storage]
    return arch.params_total * wb, 0.0


def _lora(arch: Arch, q: MemoryQuery, p: PrecisionPlan) -> tuple[list[LinearSpec], bool, int]:
    if p.task != "lora":
        return [], False, 0
    mods, head = arch.lora_modules(q.lora_targets)
    n = sum(q.lora_r * (m.d_in + m.d_out) for m in mods) * arch.n_layers
    if head:
        n += q.lora_r * (arch.hidden + arch.vocab)
    return mods, head, n


def _group_input_bytes(group: list[LinearSpec], t_in: int, p: PrecisionPlan) -> float:
    """Bytes per token one group of linear layers sharing an input keeps when its weights need the input."""
    if not group:
        return 0.0
    casts = len(group) if (t_in != p.c) else 1  # autocast / bitsandbytes cast the input once per layer
    return casts * p.c * group[0].d_in


def _input_groups(arch: Arch, p: PrecisionPlan) -> dict[str, tuple[list[LinearSpec], int]]:
    """The linear layers of a block grouped by the tensor they read, with that tensor's bytes per element."""
    return {
        "attn_in": (arch.linears_by_role("attn_in"), p.norm_out),
        "attn_out": (arch.linears_by_role("attn_out"), p.c if p.autocast else p.inter),
        "mlp_in": (arch.linears_by_role("mlp_in"), p.norm_out),
        "mlp_out": (arch.linears_by_role("mlp_out"), p.inter),
    }


def lora_input_bytes(arch: Arch, q: MemoryQuery, p: PrecisionPlan, lora_mods: list[LinearSpec]) -> float:
    """Bytes per token one block's LoRA path keeps for backward. peft's lora.Linear/Linear4bit forward runs
    lora_B(lora_A(dropout(x))): lora_A keeps its input cast to the adapter dtype (fp32 adapters) or, under autocast,
    to the compute dtype; a dropout > 0 makes that a fresh copy per adapter plus a 1-byte mask; lora_B keeps r values.
    Without dropout or cast, adapters reading the same tensor share it."""
    groups = _input_groups(arch, p)
    drop = q.lora_dropout > 0
    shared: set[str] = set()
    total = 0.0
    for m in lora_mods:
        t_in = next(t for g, t in groups.values() if m in g)
        if p.autocast or drop or t_in != p.adapter:
            total += (p.c if p.autocast else p.adapter) * m.d_in
        elif m.role not in shared:  # same tensor for every adapter reading this input
            total += p.adapter * m.d_in
            shared.add(m.role)
        total += (m.d_in if drop else 0) + (p.c if p.autocast else p.adapter) * q.lora_r
    return total


def layer_activations(arch: Arch, q: MemoryQuery, p: PrecisionPlan, lora_mods: list[LinearSpec]) -> tuple[float, float]:
    """Bytes one decoder layer keeps for backward per token: (independent of seq, per token per token of seq)."""
    h, c = arch.hidden, p.c
    full = p.task == "full"
    kappa = 1.0 if full else CAL["frozen_input_saved"] + (CAL["quantized_input_saved"] if p.storage in QUANT_DTYPES else 0.0)
    total = 0.0
    # Norms: HF RMSNorm keeps an fp32 copy of its input (+ the normalized tensor when its weight trains);
    # LayerNorm keeps its input (fp32 under CUDA autocast) plus per-token mean/rstd.
    per_norm = 4 * h if (arch.norm_type == "rms" or p.autocast) else p.residual * h
    if full and arch.norm_type == "rms":
        per_norm += p.norm_out * h
    norms = arch.norms_per_layer
    if arch.parallel_residual and arch.norm_type == "ln" and not p.autocast and norms > 1:
        total += (norms - 1) * (per_norm - p.residual * h)  # the norms of a parallel block share one saved input
        norms = 1
    total += norms * per_norm
    # Inputs of the linear layers (needed for weight gradients; frozen ones per CAL).
    groups = _input_groups(arch, p)
    for group, t_in in groups.values():
        total += kappa * _group_input_bytes(group, t_in, p)
    total += lora_input_bytes(arch, q, p, lora_mods)
    # Attention. With padding (batch > 1) transformers passes a mask and repeats k/v heads before SDPA.
    kv = arch.kv_dim if q.batch == 1 else arch.q_dim
    per_seq = 0.0
    if _attention(q, arch) == "sdpa":
        total += c * (2 * arch.q_dim + 2 * kv) + 4 * arch.n_heads  # q, k, v, out + fp32 log-sum-exp
    else:
        total += c * (arch.q_dim + 2 * kv)  # q, k for q@k^T, v for probs@v
        per_seq += (4 + c) * arch.n_heads  # fp32 softmax output + 16-bit probabilities, per key
        if arch.attn_softcap:
            per_seq += c * arch.n_heads  # tanh(scores / cap) keeps its output
        if arch.attention_dropout > 0:
            per_seq += arch.n_heads
    # MLP: SwiGLU/GeGLU keeps gate, act(gate), up; a plain MLP keeps the pre-activation (tanh GELU written in
    # Python, as GPT-2's gelu_new, keeps four intermediate tensors).
    inter = arch.intermediate
    if arch.gated_mlp:
        total += 3 * p.inter * inter
    else:
        total += (4 if arch.python_gelu else 1) * p.inter * inter
    if arch.hidden_dropout > 0:
        total += 2 * h  # residual dropout masks
    return total, per_seq


def _attention(q: MemoryQuery, arch: Arch) -> str:
    """The attention implementation that will really run (models without SDPA support fall back to eager)."""
    return q.attention if arch.sdpa else "eager"


def _ctx_tokens(arch: Arch, tokens: int) -> float:
    """Sum over layers of the tokens kept in the KV cache (sliding-window layers keep only the window)."""
    full_layers = arch.n_layers - arch.sliding_layers
    win = min(tokens, arch.sliding_window) if arch.sliding_window else tokens
    return full_layers * tokens + arch.sliding_layers * win


def _estimate_bytes(q: MemoryQuery, arch: Arch) -> tuple[dict[str, float], str, float, int, list[str], dict[str, float]]:
    """(breakdown bytes at the peak, phase, paged bytes, trainable params, notes, named components in bytes)."""
    p = precision_plan(q, arch)
    notes = list(p.notes)
    if arch.encoder:
        if q.task == "inference":
            raise KeyedConfigError("task", q.task, Msg("estimator.allowed.training_task", model_type=arch.model_type))
        notes.append(Msg("estimator.note.encoder", model_type=arch.model_type))
    if q.attention == "sdpa" and not arch.sdpa:
        notes.append(Msg("estimator.note.no_sdpa", model_type=arch.model_type))
    weights, consts = _weight_bytes(arch, p, q.double_quant)
    b, s = q.batch, q.seq_len
    h, V, c = arch.hidden, arch.vocab, p.c
    max_lin = max((m.d_in * m.d_out for m in arch.linears), default=0)
    quant = p.storage in QUANT_DTYPES

    if not p.training:
        T = s + q.new_tokens
        if arch.max_positions and T > arch.max_positions:
            notes.append(Msg("estimator.note.context", tokens=T, context=arch.max_positions))
        kv_per_tok = 2 * arch.kv_dim * c
        kv_prompt = kv_per_tok * b * _ctx_tokens(arch, s)
        kv_full = kv_per_tok * b * _ctx_tokens(arch, T)
        mlp_ws = ((3 if arch.gated_mlp else (4 if arch.python_gelu else 2)) * c * arch.intermediate + 4 * c * h) * b * s
        attn_ws = c * (2 * arch.q_dim + 2 * arch.kv_dim) * b * s
        if _attention(q, arch) == "eager":
            attn_ws += (2 * c + 4) * arch.n_heads * b * s * s + c * b * s * s  # scores, fp32 softmax, probs + 4D mask
        dequant = max_lin * c if p.storage in ("nf4", "fp4") else 0.0
        prefill = {"activations": max(mlp_ws, attn_ws), "logits/loss": b * V * (c + 4), "KV cache": kv_prompt, "temporary buffers": dequant}
        # DynamicCache grows one layer at a time with torch.cat: old and new copies of that layer coexist.
        recat = 2 * arch.kv_dim * c * b * T
        decode = {"activations": 0.0, "logits/loss": b * V * (c + 4), "KV cache": kv_full,
                  "temporary buffers": recat + (dequant if b > 1 else 0.0)}
        phases = [("prefill", prefill), ("last decoding step", decode)]
        if quant:
            # Loading: each checkpoint tensor arrives in 16-bit on the GPU before it is quantized or copied into
            # place, so the load peaks at the final weights plus the largest 16-bit tensor (often the embedding).
            phases.append(("loading", {"temporary buffers": 2.0 * max(max_lin, V * h)}))
        phase, dyn = max(phases, key=lambda kv: sum(kv[1].values()))
        out = {"weights": weights, "quantization constants": consts, **dyn}
        details = {Msg("estimator.detail.dequant_inference"): dequant} if dequant and dyn.get("temporary buffers") else {}
        return out, phase, 0.0, 0, notes, details

    # ---- training ----
    lora_mods, lora_head, n_lora = _lora(arch, q, p)
    full = p.task == "full"
    trainable = arch.params_total if full else n_lora
    if trainable == 0:
        raise ConfigError("lora_targets", q.lora_targets, allowed_key="error.estimator.allowed.targets_exist")
    grad_b = p.master if full else p.adapter
    adapters = 0.0 if full else n_lora * p.adapter
    grads = trainable * grad_b
    largest = max(max_lin, arch.vocab * h) if full else max((q.lora_r * max(m.d_in, m.d_out) for m in lora_mods), default=0)
    if lora_head:
        largest = max(largest, q.lora_r * arch.vocab)
    opt_state, step_tmp, paged = _optimizer(q.optimizer, arch, trainable, grad_b, full, largest)
    details: dict[str, float] = {}
    shares = per_gpu(q, arch, p, full, Shares(weights, consts, adapters, grads, opt_state, paged))  # ddp/fsdp: one GPU's share
    weights, consts, adapters, grads, opt_state, paged = shares.weights, shares.consts, shares.adapters, shares.grads, shares.opt_state, shares.paged
    ddp_bucket = shares.ddp_bucket
    details.update(shares.details)

    tokens = b * s
    a_tok, a_seq = layer_activations(arch, q, p, lora_mods)
    layer = (a_tok + a_seq * s) * tokens
    # Model-level: final norm; lm_head input when lm_head trains; embedding dropout mask; 4D mask for eager.
    extra = (4 * h if arch.norm_type == "rms" or p.autocast else p.residual * h) * tokens
    if full or lora_head:
        extra += c * h * tokens
    if arch.hidden_dropout > 0:
        extra += h * tokens
    if arch.encoder:
        extra += (2 * c + 4) * h * tokens  # the masked-LM head's transform: dense, GELU input, LayerNorm input
    if _attention(q, arch) == "eager":
        extra += c * b * s * s
    loss = (2 * c * V if q.chunked_loss else CAL["loss_bytes_per_vocab"] * V) * tokens
    if arch.logit_softcap:
        loss += c * V * tokens  # tanh(logits / cap) keeps its output
    # Backward working set of one layer: gradients of the widest intermediates and their inputs.
    work = ((3 if arch.gated_mlp else 2) * p.inter * arch.intermediate + 4 * c * h) * tokens
    if q.grad_ckpt:
        acts = arch.n_layers * p.residual * h * tokens + extra  # each layer keeps only its input
        work += layer  # the layer being recomputed
    else:
        acts = arch.n_layers * layer + extra
    # Temporary copies of weights: autocast casts fp32/fp16 weights to the compute dtype; copies of trainable
    # weights are cached for the whole forward, copies of frozen ones are kept by autograd for the input gradient.
    head_numel = arch.vocab * h
    tmp = 0.0
    stored = p.master if full else FLOAT_BYTES.get(p.storage, p.c)
    if p.autocast and not quant and stored != p.c:
        tmp += p.c * (arch.params_layer_linear + head_numel)
        details[Msg("estimator.detail.autocast_copies")] = p.c * (arch.params_layer_linear + head_numel)
    elif quant and p.autocast and p.nonquant != p.c:
        tmp += p.c * head_numel  # prepare_model_for_kbit_training left lm_head in fp32: a 16-bit copy per step
        details[Msg("estimator.detail.lm_head_copy")] = p.c * head_numel
    if quant:
        # bitsandbytes' MatMul4Bit dequantizes the weight into a compute-dtype buffer for every many-token matmul: in
        # forward, again for grad_input in backward, and in the checkpoint recompute; one is alive at a time.
        tmp += max_lin * c
        details[Msg("estimator.detail.dequant_training")] = max_lin * c
    if quant and p.nonquant > 2:
        details[Msg("estimator.detail.fp32_upcast")] = \
            (arch.params_total - arch.params_layer_linear) * (p.nonquant - 2)
    lora_keep = lora_input_bytes(arch, q, p, lora_mods) * tokens * (1 if q.grad_ckpt else arch.n_layers)
    if lora_keep:
        details[Msg("estimator.detail.lora_path")] = lora_keep
    if p.autocast and adapters and p.adapter != c:
        # Autocast caches the 16-bit cast of every trainable leaf (the fp32 adapters) for the whole forward, and autograd
        # keeps it for grad_input until that layer's backward; with checkpointing only the recomputed layer's are alive
        # (the fake-tensor trace shows exactly this per layer and token). A batch-independent cost.
        head_lora = q.lora_r * (h + V) if lora_head else 0
        copies = c * ((n_lora - head_lora) / (arch.n_layers if q.grad_ckpt else 1) + head_lora)
        tmp += copies
        details[Msg("estimator.detail.adapter_copies")] = copies
    g_pre = (grads if q.grad_accum > 1 else 0.0) + ddp_bucket
    static = {"weights": weights, "quantization constants": consts, "trainable weights": adapters, "optimizer state": opt_state}
    # Full fine-tuning: lm_head's weight gradient appears while the 16-bit gradient of the logits is alive.
    head_grad = head_numel * grad_b + c * V * tokens if full else 0.0
    top = max(loss, work, head_grad)
    start = {**static, "gradients": g_pre + (head_numel * grad_b if top == head_grad and full else 0.0),
             "activations": acts + (work if top == work else 0.0),
             "logits/loss": loss if top == loss else (c * V * tokens if top == head_grad else 0.0), "temporary buffers": tmp}
    emb_tmp = head_numel * grad_b if (full and arch.tied) else 0.0  # the tied embedding's two gradients are summed
    end = {**static, "gradients": grads + ddp_bucket, "temporary buffers": emb_tmp}
    step = {**static, "gradients": grads + ddp_bucket, "temporary buffers": step_tmp}
    phase, out = max((("start of backward", start), ("end of backward", end), ("optimizer step", step)), key=lambda kv: sum(kv[1].values()))
    if q.grad_accum > 1 and full:
        notes.append(Msg("estimator.note.accumulation"))
    if out.get("logits/loss"):
        details[Msg("estimator.detail.logits")] = out["logits/loss"]
    if step_tmp and phase == "optimizer step":
        details[Msg("estimator.detail_dist.paged_prefetch" if paged else "estimator.detail.step_temporary")] = step_tmp
    if paged:
        details[Msg("estimator.detail.paged_state")] = paged
    return out, phase, paged, trainable, notes, details


def _optimizer(name: str, arch: Arch, n: int, param_b: int, full: bool, largest: int = 0) -> tuple[float, float, float]:
    """(optimizer state counted by PyTorch, step temporary, paged state outside PyTorch's allocator) in bytes. A paged
    optimizer's step temporary is the state of the `largest` trainable tensor, prefetched to the GPU for its update."""
    if name == "adamw-foreach":
        # torch AdamW without fused (torch's own default, transformers 4's adamw_torch): _multi_tensor_adamw builds
        # sqrt(exp_avg_sq) for a whole parameter group at once. The HF Trainer's groups are "decay" (every weight
        # matrix) and "no decay" (biases, norms): the temporary is the state-dtype size of the larger one.
        small = arch.params_other + arch.params_layer_bias if full else 0
        return 2.0 * param_b * n, float(param_b) * max(n - small, small), 0.0
    if name == "adamw":
        # fused AdamW (transformers 5's default on torch >= 2.8, torchtune's configs, and what our Trainer runs) updates
        # each tensor in one kernel: no temporary. The older foreach AdamW made sqrt(v) for every tensor at once, one
        # state-sized temporary at the step (+1x trainable bytes), which the estimate no longer assumes.
        return 2.0 * param_b * n, 0.0, 0.0
    if name in ("adamw-8bit", "paged-adamw-8bit"):
        small = (arch.params_total - arch.params_layer_linear - arch.params_embedding - arch.params_lm_head) if full else 0
        state = 2.0 * (n - small) * (1 + 4 / 256) + 8.0 * small  # blockwise 8-bit (256) ; tensors < 4096 stay fp32
        return (0.0, 2.0 * (1 + 4 / 256) * largest, state) if name.startswith("paged") else (state, 0.0, 0.0)
    if name == "paged-adamw-32bit":
        return 0.0, 8.0 * largest, 8.0 * n
    if name == "sgd":
        return 0.0, 0.0, 0.0  # HF's "sgd": torch SGD without momentum keeps no state
    if name == "adafactor":
        # factored second moments: (rows + cols) fp32 per matrix; the update needs a full-size fp32 scratch
        rows_cols = (arch.hidden + arch.intermediate) * 4 * arch.n_layers * max(len(arch.linears), 1)
        state = 4.0 * rows_cols if full else 4.0 * n * 0.1
        return state, 8.0 * max((m.d_in * m.d_out for m in arch.linears), default=0), 0.0
    raise ConfigError("optimizer", name, allowed_key="error.estimator.allowed.optimizer")


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def fragmentation(parts: dict[str, float]) -> float:
    """Bytes the allocator reserves beyond `parts` (the allocated bytes per term), calibrated in CAL."""
    static = parts.get("weights", 0) + parts.get("quantization constants", 0) + parts.get("trainable weights", 0) + parts.get("optimizer state", 0)
    dynamic = sum(parts.values()) - static
    return CAL["frag_static"] * static + CAL["frag_dynamic"] * dynamic


def _verdict(need_gib: float, paged_gib: float, tier: HardwareTier, band: Band | None = None) -> str:
    """fits: even the high end of the band fits the card's usable memory; no: even the low end does not; tight: the
    band straddles it. On what must stay resident (`need_gib`): paged optimizer state pages out (engine/estimator/paging.py)."""
    del paged_gib  # in the signature for the callers' (need, paged) pairs
    low, high = (band.low, band.high) if band is not None else (1.0, 1.0)
    var = need_gib - tier.cuda_context_gib  # the band is on what PyTorch holds; the context is the card's own
    upper, lower = tier.cuda_context_gib + var * high, tier.cuda_context_gib + var * low
    if upper <= tier.usable_gib:
        return "fits"
    if lower <= tier.usable_gib:
        return "tight"
    return "no"


@functools.lru_cache(maxsize=1024)
def band_of(task: str, model: str, grad_ckpt: bool | None = None, multi_gpu: bool = False) -> Band:
    """The cross-validated band of an estimate of `task` on `model` (engine/estimator/accuracy.py), of the jobs with
    or without gradient checkpointing, on one GPU or several, when enough measurements tell them apart."""
    try:
        return band_for(task, model, grad_ckpt=grad_ckpt, multi_gpu=multi_gpu)
    except EngineError as exc:
        return Band(1.0, 1.0, 0, category_of(task), f"no accuracy data ({exc})")


def query_band(query: MemoryQuery) -> Band:
    """The band of this query's estimate."""
    training = query.task != "inference"
    return band_of(query.task, query.model, query.grad_ckpt if training else None,
                   training and query.distributed != "none" and query.gpus > 1)


def tier_verdict(query: MemoryQuery, tier: HardwareTier) -> str:
    """fits | tight | no for the query on `tier` (any HardwareTier, e.g. one whose usable memory was corrected
    from this machine's runs), with the query's band. Under ddp/fsdp it is the verdict for each GPU."""
    return _verdict(*need_gib(query, tier), tier, query_band(query))


def estimate(query: MemoryQuery) -> MemoryEstimate:
    """Peak memory of the job described by `query`, its breakdown, and a verdict for every hardware tier."""
    if not isinstance(query, MemoryQuery):
        raise ConfigError("query", type(query).__name__, allowed_key="error.estimator.allowed.query")
    parts, phase, paged, trainable, notes, arch, details = estimate_by_key(query_key(query))
    allocated = sum(parts.values())
    frag = fragmentation(parts)
    breakdown = {t: 0.0 for t in TERMS}
    for k, v in parts.items():
        breakdown[k] += v / GIB
    breakdown["fragmentation"] = frag / GIB
    breakdown["CUDA context"] = CAL["cuda_context_gib"]
    # Paged optimizer state is unified memory: outside PyTorch's count, but resident on the GPU (and in nvidia-smi)
    # while there is room; counted in what nvidia-smi shows, not in allocated.
    breakdown["optimizer state"] += paged / GIB
    band = query_band(query)
    tiers, paged_out = {}, {}
    for t in hardware_tiers():
        need = (allocated + frag) / GIB + t.cuda_context_gib
        tiers[t.name] = _verdict(need, paged / GIB, t, band)
        if paged and tiers[t.name] != "no":
            paged_out[t.name] = paged_out_gib(need, paged / GIB, t)
    notes = list(notes)
    if paged:
        notes.append(Msg("estimator.note.paged", gib=round(paged / GIB, 2)))
    if query.task == "inference" and query.training_precision != "amp-bf16":
        notes.append(Msg("estimator.note.inference_precision"))
    return MemoryEstimate(
        query=query, model=arch.label, params=arch.params_total, trainable_params=trainable,
        breakdown_gib=breakdown, allocated_gib=allocated / GIB, total_gib=(allocated + frag + paged) / GIB + CAL["cuda_context_gib"],
        tiers=tiers, notes=notes, phase=phase, spillable_gib=paged / GIB, effective_batch=query.batch * query.grad_accum,
        details_gib={k: v / GIB for k, v in details.items()}, band=band, paged_out_gib=paged_out,
    )


def query_key(q: MemoryQuery) -> tuple:
    """The cache key of `estimate_by_key`; its model through the visitor gate first (a cache must not answer a refused path)."""
    return tuple(gate(q.model) if f.name == "model" else getattr(q, f.name) for f in dataclasses.fields(q))


@functools.lru_cache(maxsize=8192)
def estimate_by_key(key: tuple) -> tuple[dict[str, float], str, float, int, tuple[str, ...], Arch, dict[str, float]]:
    """(bytes per term, peak phase, paged bytes, trainable params, notes, Arch, named components in bytes) of
    `query_key(q)`, cached: the capacity searches ask the same queries many times."""
    q = MemoryQuery(**dict(zip((f.name for f in dataclasses.fields(MemoryQuery)), key, strict=True)))
    arch = resolve(q.model)
    parts, phase, paged, trainable, notes, details = _estimate_bytes(q, arch)
    return parts, phase, paged, trainable, tuple(notes), arch, details


def need_gib(query: MemoryQuery, tier: HardwareTier) -> tuple[float, float]:
    """(GPU memory the job needs on this tier incl. fragmentation and context, paged optimizer state) in GiB."""
    parts, _, paged, _, _, _, _ = estimate_by_key(query_key(query))
    return (sum(parts.values()) + fragmentation(parts)) / GIB + tier.cuda_context_gib, paged / GIB


def _fits(query: MemoryQuery, tier: HardwareTier) -> bool:
    return tier_verdict(query, tier) != "no"


def breakdown_rows(est: MemoryEstimate, lang: str = "en") -> list[list[Any]]:
    """Rows for a table: [term, GiB (3 decimals), what it is], every term in TERMS order (zeros included), in `lang`."""
    return [[term_name(term, lang), round(est.breakdown_gib.get(term, 0.0), 3), term_what(term, lang)] for term in TERMS]


def detail_rows(est: MemoryEstimate) -> list[list[Any]]:
    """Rows [component, GiB] for the named physical components inside the terms (fixed costs of 4-bit training,
    autocast copies, the loss, the optimizer step), largest first."""
    return [[k, round(v, 4)] for k, v in sorted(est.details_gib.items(), key=lambda kv: -kv[1]) if v > 0]


def model_choices() -> list[str]:
    """Built-in compact presets then catalog names, for a dropdown."""
    import yaml

    from .catalog import PRESETS_DIR

    try:
        builtin = list(yaml.safe_load((PRESETS_DIR / "compact.yaml").read_text(encoding="utf-8")) or {})
    except (OSError, yaml.YAMLError):
        builtin = []
    return [f"builtin:{n}" for n in builtin] + [e.name for e in catalog()]


def _search_max(query: MemoryQuery, tier: HardwareTier, field_name: str, hi: int) -> int:
    def ok(v: int) -> bool:
        return _fits(dataclasses.replace(query, **{field_name: v}), tier)

    if not ok(1):
        return 0
    lo = 1
    probe = 2
    while probe <= hi and ok(probe):  # grow geometrically, then bisect: ~2 log2(answer) estimates
        lo, probe = probe, probe * 2
    hi = min(probe, hi + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def max_batch(query: MemoryQuery, tier_name: str) -> int:
    """Largest micro-batch that fits the tier's usable memory (0 when even batch 1 does not)."""
    return _search_max(query, tier_by_name(tier_name), "batch", 65536)


def max_seq_len(query: MemoryQuery, tier_name: str) -> int:
    """Longest sequence (prompt for inference) that fits the tier, capped at the model's context length."""
    arch = resolve(query.model)
    cap = 1_048_576
    if arch.max_positions:
        cap = max(1, int(arch.max_positions) - (query.new_tokens if query.task == "inference" else 0))
    return _search_max(query, tier_by_name(tier_name), "seq_len", cap)


def query_from_json(data: dict[str, Any]) -> MemoryQuery:
    """A MemoryQuery from one JSONL query object (lists allowed for lora_targets); ConfigError names the field."""
    if not isinstance(data, dict):
        raise ConfigError("query", data, allowed_key="error.estimator.allowed.query_json")
    if "model" not in data:
        raise ConfigError("model", None, allowed_key="error.estimator.allowed.model_required")
    data = dict(data)
    if isinstance(data.get("lora_targets"), (list, tuple)):
        targets = data["lora_targets"]
        if not all(isinstance(t, str) for t in targets):
            raise ConfigError("lora_targets", targets, allowed_key="message.allowed.targets_list")
        data["lora_targets"] = ",".join(targets)
    return from_dict(MemoryQuery, data)


# --------------------------------------------------------------------------------------------------
# Make it fit
# --------------------------------------------------------------------------------------------------

# (cost order, cost text). Lower order = cheaper in speed/quality. The texts: estimator.cost.* in presets/lang.
_COSTS = {key: (order, Msg(f"estimator.cost.{key}")) for key, order in {
    "attention": 0, "optimizer": 1, "double_quant": 1, "grad_ckpt": 2, "batch": 3, "chunked_loss": 3, "quantize": 4,
    "lora_targets": 5, "lora_r": 5, "seq_len": 6, "new_tokens": 6, "task": 7}.items()}
# Several GPUs under ddp: sharding them with fsdp costs communication, not results (texts in estimator.*_dist).
_COSTS["fsdp"] = (2, Msg("estimator.cost_dist.fsdp"))


def _candidates(q: MemoryQuery, arch: Arch, tier: HardwareTier) -> list[tuple[str, str, dict[str, Any]]]:
    """(cost key, description, changes) for every single change worth trying."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    training = q.task != "inference"
    if q.attention == "eager":
        out.append(("attention", Msg("estimator.fit.sdpa"), {"attention": "sdpa"}))
    if training and q.distributed == "ddp" and q.gpus > 1:
        out.append(("fsdp", Msg("estimator.fit_dist.fsdp", gpus=q.gpus), {"distributed": "fsdp"}))
    if training and q.optimizer in ("adamw", "paged-adamw-32bit"):
        out.append(("optimizer", Msg("estimator.fit.adamw_8bit"), {"optimizer": "adamw-8bit"}))
        out.append(("optimizer", Msg("estimator.fit.paged_adamw_8bit"), {"optimizer": "paged-adamw-8bit"}))
    if q.weight_precision in ("nf4", "fp4") or (q.task == "qlora" and q.weight_precision == "auto"):
        if not q.double_quant:
            out.append(("double_quant", Msg("estimator.fit.double_quant"), {"double_quant": True}))
    if training and not q.grad_ckpt:
        out.append(("grad_ckpt", Msg("estimator.fit.grad_ckpt"), {"grad_ckpt": True}))
    if training and q.batch > 1:
        b = _best_batch(q, tier)
        if b:
            accum = q.grad_accum * math.ceil(q.batch / b)
            out.append(("batch", Msg("estimator.fit.micro_batch", batch=b, accum=accum, effective=b * accum), {"batch": b, "grad_accum": accum}))
    if q.task == "inference":
        for wp in ("int8", "nf4"):
            if _rank_precision(wp) < _rank_precision(_effective_wp(q)):
                out.append(("quantize", Msg("estimator.fit.load_in", precision=wp), {"weight_precision": wp}))
    elif q.task == "lora" and _effective_wp(q) not in QUANT_DTYPES:
        out.append(("quantize", Msg("estimator.fit.qlora"), {"task": "qlora", "weight_precision": "nf4", "double_quant": True}))
    elif q.task == "full":
        out.append(("task", Msg("estimator.fit.full_to_lora"), {"task": "lora", "weight_precision": "bf16"}))
        out.append(("task", Msg("estimator.fit.full_to_qlora"), {"task": "qlora", "weight_precision": "nf4", "double_quant": True}))
    if q.task in ("lora", "qlora"):
        for spec, key in (("attention", "lora_attention"), ("q,v", "lora_qv")):
            if spec != q.lora_targets and _n_lora(arch, spec) < _n_lora(arch, q.lora_targets):
                out.append(("lora_targets", Msg(f"estimator.fit.{key}"), {"lora_targets": spec}))
        if q.lora_r > 8:
            out.append(("lora_r", Msg("estimator.fit.lora_r"), {"lora_r": 8}))
    s = _search_max(q, tier, "seq_len", q.seq_len - 1) if q.seq_len > 1 else 0
    if s:
        s = max(16, (s // 16) * 16) if s >= 16 else s
        out.append(("seq_len", Msg("estimator.fit.prompt_len" if q.task == "inference" else "estimator.fit.seq_len", tokens=s), {"seq_len": s}))
    if q.task == "inference" and q.new_tokens > 1:
        n = _search_max(q, tier, "new_tokens", q.new_tokens - 1)
        if n:
            out.append(("new_tokens", Msg("estimator.fit.new_tokens", tokens=n), {"new_tokens": n}))
    return out


def _effective_wp(q: MemoryQuery) -> str:
    if q.weight_precision != "auto":
        return q.weight_precision
    return {"qlora": "nf4", "full": "fp32", "lora": "bf16", "inference": "bf16"}[q.task]


def _rank_precision(wp: str) -> int:
    return {"fp32": 5, "fp16": 4, "bf16": 4, "int8": 3, "nf4": 2, "fp4": 2}[wp]


def _n_lora(arch: Arch, spec: str) -> int:
    try:
        mods, head = arch.lora_modules(spec)
    except EngineError:
        return 1 << 62
    return sum(m.d_in + m.d_out for m in mods) + (arch.hidden + arch.vocab if head else 0)


def _best_batch(q: MemoryQuery, tier: HardwareTier) -> int:
    # searched with accumulation on: the gradients then stay allocated between micro-batches
    b = _search_max(dataclasses.replace(q, grad_accum=max(2, q.grad_accum)), tier, "batch", q.batch - 1)
    while b > 1 and q.batch % b:  # prefer a divisor so that the effective batch stays the same
        b -= 1
    return b


def make_it_fit(query: MemoryQuery, tier_name: str) -> list[Suggestion]:
    """The cheapest changes that bring the job under the tier's usable memory, cheapest first.

    Single changes that are enough on their own come first, ranked by their cost in speed/quality and then by
    the memory they leave free; a shorter sequence only counts when it keeps at least half of it. Unless a cheap
    single change (<= checkpointing) suffices, the cheapest combination found greedily is offered too: cheap
    changes first, then micro-batch 1 with accumulation, then the longest sequence that fits. An empty list
    means the job already fits (comfortably, or tightly with nothing cheap to gain); a single entry with empty
    `changes` says nothing in reach fits.
    """
    tier = tier_by_name(tier_name)
    arch = resolve(query.model)
    start = tier_verdict(query, tier)
    if start == "fits":
        return []
    better = ("fits",) if start == "tight" else ("fits", "tight")  # a suggestion must improve the verdict
    ranked: list[tuple[int, float, Suggestion]] = []
    for key, desc, changes in _candidates(query, arch, tier):
        if key in ("seq_len", "new_tokens") and 2 * next(iter(changes.values())) < getattr(query, key):
            continue  # halving the sequence or more is not a fix worth offering on its own
        cand = dataclasses.replace(query, **changes)
        need, paged = need_gib(cand, tier)
        verdict = tier_verdict(cand, tier)
        if verdict in better:
            ranked.append((_COSTS[key][0], need + paged, Suggestion(desc, changes, round(need, 3), _COSTS[key][1], 0, verdict)))
    if not any(r[0] <= _COSTS["grad_ckpt"][0] and r[2].verdict == "fits" for r in ranked):
        combo = _combination(query, arch, tier)
        if combo is not None and combo[2].verdict in better and all(r[2].changes != combo[2].changes for r in ranked):
            ranked.append(combo)
    ranked.sort(key=lambda r: (r[0], r[2].verdict != "fits", r[1]))
    out = [r[2] for r in ranked]
    if not out and start == "tight":
        return []  # it already fits, without headroom, and nothing cheap adds any
    if not out:
        floor = dataclasses.replace(query, batch=1, seq_len=min(query.seq_len, 16), new_tokens=min(query.new_tokens, 16))
        need, _ = need_gib(floor, tier)
        out.append(Suggestion(Msg("estimator.fit.nothing", card=tier_msg(tier), tokens=floor.seq_len, need=round(need, 1), usable=tier.usable_gib),
                              {}, round(need, 3), "", 0, "no"))
    return [dataclasses.replace(s, rank=i + 1) for i, s in enumerate(out)]


def _combination(query: MemoryQuery, arch: Arch, tier: HardwareTier) -> tuple[int, float, Suggestion] | None:
    """Greedy: apply the cheapest change that still helps until the job fits; shorten the sequence last."""
    q, combo, keys = query, {}, []
    while tier_verdict(q, tier) != "fits":
        options = []
        for key, _desc, changes in _candidates(q, arch, tier):
            if key in ("seq_len", "new_tokens") or any(k in combo and k != "grad_accum" for k in changes):
                continue
            if changes.get("optimizer") == "paged-adamw-8bit":
                continue  # plain 8-bit AdamW saves the same; paging is offered as a single change
            if key == "batch" and "batch" in combo:
                continue
            nq = dataclasses.replace(q, **changes)
            need = sum(need_gib(nq, tier))  # paged optimizer state counted too: it is on the GPU when it fits
            if need < sum(need_gib(q, tier)) - 1e-9:
                options.append((_COSTS[key][0], need, key, changes, nq))
        if not options and q.task != "inference" and q.batch > 1 and "batch" not in combo:
            nq = dataclasses.replace(q, batch=1, grad_accum=q.grad_accum * q.batch)
            options.append((_COSTS["batch"][0], sum(need_gib(nq, tier)), "batch", {"batch": 1, "grad_accum": nq.grad_accum}, nq))
        if not options:
            break
        _, _, key, changes, q = min(options, key=lambda o: (o[0], o[1]))
        combo.update(changes)
        keys.append(key)
    if not _fits(q, tier):
        best = _search_max(q, tier, "seq_len", q.seq_len - 1) if q.seq_len > 1 else 0
        if not best:
            return None
        q = dataclasses.replace(q, seq_len=best)
        combo["seq_len"] = best
        keys.append("seq_len")
    if not keys:
        return None
    need, paged = need_gib(q, tier)
    desc = Msg("estimator.fit.together", changes=[change_msg(k, v) for k, v in combo.items()])
    cost = Msg("estimator.fit.costs", costs=list(dict.fromkeys(_COSTS[k][1] for k in keys)))
    return max(_COSTS[k][0] for k in keys), need + paged, Suggestion(desc, combo, round(need, 3), cost, 0, tier_verdict(q, tier))
