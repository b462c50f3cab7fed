"""Hardware presets for the fine-tune form: a tier's recipe, adapted with the estimator to the chosen model.

presets/recipes.yaml holds one recipe per hardware tier, each checked against a model of the size it was written
for. The form's model may be smaller or larger than that, so `apply_recipe` starts from the recipe and lets the
memory estimator (engine/estimator/memory.py) adapt it to *this* model on *that* tier, deterministically:

1. precision: never bf16 on a tier without it (T4, older GPUs -> fp16 mixed precision; CPU tiers -> fp32);
2. the context is capped at the model's own maximum;
3. QLoRA -> 16-bit LoRA when the model fits comfortably without quantization (no quantization loss, faster);
4. while it does not fit, apply the estimator's cheapest "make it fit" change (checkpointing, 8-bit optimizer,
   smaller micro batch, QLoRA, shorter sequences ...); a job that is only tight gets the cheap ones only;
5. with room to spare, a larger micro batch with less accumulation (same effective batch, faster steps).

The result is the form values (TrainConfig dotted names), the verdict and a short explanation for the user.
A model the estimator cannot resolve (offline and not in the catalog, a previous run) gets the recipe as is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..config import MemoryQuery, TrainConfig
from ..errors import ConfigError, EngineError
from ..fields import from_flat, to_dict
from ..hardware.device import DeviceInfo
from .catalog import HardwareTier, hardware_tiers, recipes_for, tier_by_name

AUTO = "auto"  # the form's "this machine" choice: the tier detected by tier_for_device
# make_it_fit changes that cost quality; a job that is merely "tight" is not worth them
_QUALITY_KEYS = {"seq_len", "task", "lora_targets", "lora_r", "weight_precision"}
_MAX_ADAPT_STEPS = 6


@dataclass(frozen=True)
class AppliedRecipe:
    """What a hardware preset fills into the fine-tune form."""

    tier: str
    recipe: str  # the recipe's name
    values: dict[str, Any]  # TrainConfig dotted field name -> value
    verdict: str | None  # fits | tight | no on the tier; None when the model is unknown to the estimator
    need_gib: float | None  # predicted memory the job takes on the tier (what nvidia-smi would show, paged state included)
    changes: list[str] = field(default_factory=list)  # what was adapted to the model, in order
    explanation: str = ""


def tier_choices() -> list[tuple[str, str]]:
    """(label, name) pairs for a dropdown: "this machine" first, then every tier that has a recipe."""
    with_recipe = [t for t in hardware_tiers() if recipes_for(t.name)]
    return [("Auto: this machine", AUTO)] + [(t.label, t.name) for t in with_recipe]


def tier_for_device(device: DeviceInfo) -> str:
    """The tier (with a recipe) that describes `device`: the largest one whose memory the device has, matching
    bf16 support on GPUs (a T4 is the t4-16gb tier, not a 16 GB Ampere card). The smallest tier of the right
    kind when the device is below all of them."""
    kind = "gpu" if device.kind == "cuda" else "cpu"
    tiers = [t for t in hardware_tiers() if t.kind == kind and recipes_for(t.name)]
    if not tiers:
        raise EngineError(f"No hardware preset for a {device.kind} device in presets/recipes.yaml.")
    if kind == "gpu" and "T4" in device.name.upper() and any(t.name == "t4-16gb" for t in tiers):
        return "t4-16gb"
    # 3% slack: cards report a little less than their nominal size (a "16 GB" card shows 15.6-15.9 GiB)
    fitting = [t for t in tiers if t.total_gib <= device.total_gib * 1.03 and (kind == "cpu" or not t.bf16 or device.bf16)]
    return max(fitting, key=lambda t: (t.usable_gib, t.bf16)).name if fitting else min(tiers, key=lambda t: t.usable_gib).name


def apply_recipe(cfg_values: dict[str, Any], tier: str, model: str) -> AppliedRecipe:
    """The form values for hardware tier `tier` and base model `model`, starting from `cfg_values` (the form as
    it is; fields the recipe does not set are kept). `tier` "auto" means this machine (engine/hardware/device.py).
    Raises ConfigError for an unknown tier."""
    machine = ""
    if tier == AUTO:
        from ..hardware.device import detect_device

        device = detect_device()
        tier = tier_for_device(device)
        machine = f"This machine: {device.name} ({device.total_gib:.1f} GiB) → "
    t = tier_by_name(tier)
    found = recipes_for(t.name)
    if not found:
        raise ConfigError("tier", tier, allowed_key="visitor_error.preset_tier", tiers=[n for _, n in tier_choices() if n != AUTO])
    recipe = found[0]
    values = {**dict(cfg_values), **recipe.settings, "base_model": model}
    changes: list[str] = []
    values.update(_precision_for(t, values, changes, _model_type(model)))

    cfg = _config(values)
    try:
        from .model_config import resolve

        arch = resolve(model)
    except EngineError as exc:
        values = _normalize(cfg)
        note = f"{model} is unknown to the memory estimator ({exc}); the recipe is used as written, without a memory check."
        return AppliedRecipe(t.name, recipe.name, values, None, None, changes, machine + _explain(recipe.name, t, model, changes, None, None, note))

    if arch.max_positions and cfg.max_seq_len > arch.max_positions:
        seq = max(16, (int(arch.max_positions) // 16) * 16)
        changes.append(f"sequence length {seq} (the model's context)")
        cfg = dataclasses.replace(cfg, max_seq_len=seq)

    dtype = _dtype_name(cfg.precision, t)
    query = _query(cfg, dtype)
    if cfg.method == "qlora":  # no quantization when the 16-bit base fits comfortably
        lora_q = dataclasses.replace(query, task="lora", weight_precision=dtype)
        if _verdict(lora_q, t) == "fits":
            query = lora_q
            changes.append(f"LoRA on the {dtype} model instead of QLoRA (it fits without quantization)")

    query = _fit(query, t, changes)
    query = _widen_batch(query, t, changes)

    values = _normalize(_config(_to_train_values(query, cfg, values)))
    verdict = _verdict(query, t)
    from .memory import need_gib

    need, paged = need_gib(query, t)
    return AppliedRecipe(t.name, recipe.name, values, verdict, round(need + paged, 2), changes,
                         machine + _explain(recipe.name, t, model, changes, verdict, need + paged))


# --------------------------------------------------------------------------------------------------


def _model_type(model: str) -> str | None:
    """The model's config model_type as the estimator resolves it (None when unknown to it)."""
    from .model_config import resolve

    try:
        return resolve(model).model_type or None
    except EngineError:
        return None


def _precision_for(t: HardwareTier, values: dict[str, Any], changes: list[str], model_type: str | None = None) -> dict[str, Any]:
    """Never bf16 where the tier has none: fp16 mixed precision on GPUs, auto on CPUs (no fast fp16 there; bf16 or fp32
    by the CPU's own speed, measured where the run trains; estimated as fp32); fp32 on a GPU
    without bf16 for the families that overflow in fp16 (presets/precision.yaml, the rule engine/hardware/device.py
    applies to the form and the run)."""
    from ..hardware.device import fp16_rule

    out: dict[str, Any] = {}
    wanted = values.get("precision", "auto")
    rule = fp16_rule(model_type) if t.kind != "cpu" else None
    reason = "CPUs have no fast fp16: auto computes in bf16 where the CPU is fast at it, else fp32" if t.kind == "cpu" else "this card has no bf16"
    if t.kind == "cpu":
        # auto, decided on the machine that trains (engine/hardware/cpu_bf16.py): bf16 autocast where it is fast
        prec = "auto" if wanted == "fp16" else wanted
    elif rule is not None and rule.policy == "fp32" and (wanted == "fp16" or (not t.bf16 and wanted in ("bf16", "auto"))):
        prec = "bf16" if t.bf16 else "fp32"
        reason = f"{rule.name} overflows in fp16" + ("" if t.bf16 else " and this card has no bf16")
    elif wanted in ("bf16", "auto"):
        prec = "bf16" if t.bf16 else "fp16"
    else:
        prec = wanted
    if prec != wanted:
        changes.append(f"{prec} instead of {wanted} ({reason})")
    out["precision"] = prec
    if values.get("method") == "qlora" or values.get("quant.mode") in ("4bit", "8bit"):
        out["quant.compute_dtype"] = prec  # 4/8-bit layers compute in the training precision
    return out


def _config(values: dict[str, Any]) -> TrainConfig:
    values = dict(values)
    method = values.get("method")
    # the same rule as the form: qlora loads the base in 4-bit, lora may keep an 8-bit base, full/scratch none
    values["quant.mode"] = "4bit" if method == "qlora" else ("8bit" if method == "lora" and values.get("quant.mode") == "8bit" else "none")
    return from_flat(TrainConfig, values)


def _normalize(cfg: TrainConfig) -> dict[str, Any]:
    """TrainConfig -> flat dotted values (what the form's components are keyed by)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, obj: dict[str, Any]) -> None:
        for k, v in obj.items():
            if isinstance(v, dict):
                walk(f"{prefix}{k}.", v)
            else:
                flat[prefix + k] = v

    walk("", to_dict(cfg))
    return flat


def _dtype_name(precision: str, t: HardwareTier) -> str:
    if precision != "auto":
        return precision
    return "fp32" if t.kind == "cpu" else ("bf16" if t.bf16 else "fp16")


def _query(cfg: TrainConfig, dtype: str) -> MemoryQuery:
    from .handoff import query_from_train

    return query_from_train(cfg, dtype)


def _verdict(q: MemoryQuery, t: HardwareTier) -> str:
    from .memory import estimate

    return estimate(q).tiers[t.name]


def _fit(q: MemoryQuery, t: HardwareTier, changes: list[str]) -> MemoryQuery:
    """Apply the estimator's cheapest suggestion until the job fits (or is tight with nothing cheap left)."""
    from .memory import make_it_fit

    for _ in range(_MAX_ADAPT_STEPS):
        verdict = _verdict(q, t)
        if verdict == "fits":
            break
        suggestions = make_it_fit(q, t.name)
        if verdict == "tight":  # it runs: only changes that cost no quality
            suggestions = [s for s in suggestions if s.changes and not (_QUALITY_KEYS & set(s.changes))]
        if not suggestions or not suggestions[0].changes:
            break  # nothing in reach fits (the explanation says so)
        s = suggestions[0]
        q = dataclasses.replace(q, **s.changes)
        changes.append(s.description[0].lower() + s.description[1:])
    return q


def _widen_batch(q: MemoryQuery, t: HardwareTier, changes: list[str]) -> MemoryQuery:
    """More samples per pass while it still fits comfortably, keeping the effective batch (faster steps)."""
    effective = q.batch * q.grad_accum
    b = q.batch
    while b * 2 <= effective and effective % (b * 2) == 0:
        cand = dataclasses.replace(q, batch=b * 2, grad_accum=effective // (b * 2))
        if _verdict(cand, t) != "fits":
            break
        b *= 2
    if b != q.batch:
        changes.append(f"micro batch {b} × accumulation {effective // b} (there is room; same effective batch {effective})")
        q = dataclasses.replace(q, batch=b, grad_accum=effective // b)
    return q


def _to_train_values(q: MemoryQuery, cfg: TrainConfig, values: dict[str, Any]) -> dict[str, Any]:
    """The form values after the estimator's changes (method, quantization, batch, sequence, LoRA, optimizer)."""
    from .handoff import train_values_from_query

    out = {**_normalize(cfg), **{k: v for k, v in values.items() if k in ("precision", "quant.compute_dtype")}}
    for key, value in train_values_from_query(q).items():
        if key in ("base_model", "precision"):
            continue  # the form's model reference (a Hub id stays a Hub id); precision was chosen above
        out[key] = value
    if q.task == "qlora":
        out["method"] = "qlora"
        out["quant.compute_dtype"] = out["precision"]
    elif q.task == "lora" and cfg.method == "qlora":
        out["method"] = "lora"
    if out["lora.r"] == cfg.lora.r:
        out["lora.alpha"] = cfg.lora.alpha  # keep the user's alpha unless the rank changed
    return out


def _explain(name: str, t: HardwareTier, model: str, changes: list[str], verdict: str | None, need: float | None, note: str = "") -> str:
    head = f"**{name}** ({t.label})."
    adapted = (" Adapted to " + model + ": " + "; ".join(changes) + ".") if changes else ""
    if verdict is None:
        return f"{head}{adapted} {note}".strip()
    word = {"fits": "✔ fits", "tight": "⚠ tight", "no": "✖ does not fit"}[verdict]
    tail = f" Predicted {need:.2f} GiB of {t.usable_gib:.1f} GiB usable: **{word}**."
    if verdict == "no":
        tail += " Even the cheapest settings the estimator knows do not fit: pick a smaller model or a larger card."
    return head + adapted + tail
