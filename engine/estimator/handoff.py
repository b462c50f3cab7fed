"""Moving settings between panels: an estimator query <-> fine-tune form values, the fit verdict, and the checks
of model references and configs that come from a browser (no server paths unless allowed).

Kept out of the page (ui/) so the UI stays free of logic and so the mapping is tested on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import MemoryQuery, TrainConfig
from ..errors import ConfigError, EngineError
from ..refs import BUILTIN_PREFIX, HUB_MODEL_ID_RE, MERGED_SUFFIX, RUN_PREFIX, is_plain_name, looks_like_path
from ..sharing import check_local_model
from .catalog import HardwareTier, catalog_lookup, method_learning_rate, tier_by_name
from .texts import KeyedConfigError, Msg


def train_values_from_query(q: MemoryQuery) -> dict[str, Any]:
    """Fine-tune form values (TrainConfig dotted field names) for an estimator query."""
    values: dict[str, Any] = {
        "micro_batch_size": q.batch,
        "grad_accum": q.grad_accum,
        "max_seq_len": q.seq_len,
        "grad_checkpointing": q.grad_ckpt,
        "lora.r": q.lora_r,
        "lora.alpha": 2 * q.lora_r,
    }
    if q.task in ("qlora", "lora", "full"):
        values["method"] = q.task
    if q.task == "lora" and q.weight_precision == "int8":
        values["method"] = "lora"
    if q.task == "qlora" and q.weight_precision in ("nf4", "fp4"):
        values["quant.mode"] = "4bit"
        values["quant.quant_type"] = q.weight_precision
        values["quant.double_quant"] = q.double_quant
    if q.optimizer in ("adamw", "adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit", "sgd"):
        values["optimizer"] = q.optimizer
    elif q.optimizer == "adamw-foreach":
        values["optimizer"] = "adamw"  # training always runs the fused AdamW: same states, no step temporary
    targets = q.lora_targets
    if isinstance(targets, (list, tuple)):
        targets = ",".join(targets)
    values["lora.targets"] = _train_targets(str(targets))
    if not q.model.startswith(("/", "manual:")) and not q.model.endswith(".json"):
        entry = catalog_lookup(q.model)
        # a catalog short name ("qwen2.5-1.5b") names no loadable model: the fine-tune form gets its Hugging Face id
        values["base_model"] = entry.hf_id if entry is not None and "/" not in q.model else q.model
    values["precision"] = {"amp-fp16": "fp16", "amp-bf16": "bf16", "pure-bf16": "bf16", "fp32": "fp32"}[q.training_precision]
    values["distributed"] = q.distributed if q.gpus > 1 else "none"
    if q.distributed != "none" and q.gpus > 1:
        values["gpus"] = q.gpus
    return values


def card_precision(training_precision: str, tier: HardwareTier) -> str:
    """The Fine-tune form's precision for a plan made for `tier` (engine/hardware/device.py decides what it computes in):
    `auto` where the plan's training precision is what auto picks on that card, and wherever an explicit choice could be
    refused on it: a bf16 the card lacks (a T4: auto gives fp16 there, fp32 for the families that overflow in fp16, which
    an explicit fp16 would meet as a refusal), any 16-bit choice on a CPU card (auto: bf16 autocast where that CPU is
    fast at it, else fp32). The explicit choice otherwise: fp32, fp16 on a card with bf16, bf16 with everything in bf16."""
    if training_precision == "fp32":
        return "fp32"
    if tier.kind == "cpu" or not tier.bf16:
        return "auto"
    return {"amp-bf16": "auto", "pure-bf16": "bf16", "amp-fp16": "fp16"}[training_precision]


def card_training_precision(training_precision: str, tier_name: str) -> str:
    """The estimator's training precision once the card `tier_name` is chosen: amp-fp16 on a GPU without bf16 (a T4)
    where a bf16 one was set, amp-bf16 back on a card with bf16 where amp-fp16 was (the usual choice there: the same
    memory), fp32 on a CPU card where amp-fp16 was (a CPU has no fast fp16); otherwise unchanged. An unknown card
    changes nothing."""
    try:
        tier = tier_by_name(tier_name)
    except EngineError:
        return training_precision
    if tier.kind == "cpu":
        return "fp32" if training_precision == "amp-fp16" else training_precision
    if not tier.bf16 and training_precision in ("amp-bf16", "pure-bf16"):
        return "amp-fp16"
    if tier.bf16 and training_precision == "amp-fp16":
        return "amp-bf16"
    return training_precision


def train_values_for_card(q: MemoryQuery, tier_name: str) -> dict[str, Any]:
    """The Fine-tune form values for a plan made on the card `tier_name`: train_values_from_query's, with the precision
    that card takes (card_precision; the 4-bit layers compute in it too) and the peak learning rate of the method
    (presets/recipes.yaml learning_rates), so that Start on that card accepts what the estimator proposed."""
    values = train_values_from_query(q)
    tier = tier_by_name(tier_name)
    values["precision"] = card_precision(q.training_precision, tier)
    if values.get("method") == "qlora":
        values["quant.compute_dtype"] = values["precision"]
    method = values.get("method")
    if method is not None:
        values["learning_rate"] = method_learning_rate(method, str(values.get("base_model", q.model)))
    return values


_SHORT = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj", "down": "down_proj", "lm_head": "lm_head"}


def estimate_train(cfg: TrainConfig, dtype: str, model: str | None = None, *, on_cpu: bool = False) -> Any:
    """The MemoryEstimate of a training config (query_from_train's query), with what DPO, ORPO and GRPO add
    (engine/estimator/objectives.py: the reference model, the pairs, the generated answers)."""
    from ..objectives import OBJECTIVE_METHODS
    from .memory import estimate

    query = query_from_train(cfg, dtype, model, on_cpu=on_cpu)
    if cfg.method not in OBJECTIVE_METHODS:
        return estimate(query)
    from .objectives import estimate_objective

    return estimate_objective(query, cfg.method, num_generations=cfg.num_generations, completion_len=cfg.max_completion_length)


def query_from_train(cfg: TrainConfig, dtype: str, model: str | None = None, *, on_cpu: bool = False) -> MemoryQuery:
    """The estimator query for a training config run in `dtype` ("fp32" | "fp16" | "bf16").

    model: what the estimator should resolve (a config.json path for runs/local folders); default base_model.
    on_cpu: the run trains on a CPU (bf16 there is autocast over fp32 master weights).
    """
    if cfg.weights == "qlora":
        wp = cfg.quant.quant_type
    elif cfg.weights == "lora" and cfg.quant.mode == "8bit":
        wp = "int8"
    elif cfg.weights == "full" and (dtype == "fp16" or (dtype == "bf16" and on_cpu)):
        wp = "fp32"  # AMP keeps fp32 master weights: the loader's rule (engine/hardware/device.py master_dtype)
    else:
        wp = dtype
    tp = {"fp32": "fp32", "fp16": "amp-fp16", "bf16": "amp-bf16"}[dtype]
    return MemoryQuery(
        model=model or cfg.base_model,
        # distill: the student trains in full; the frozen teacher is added by engine.training.distill.estimate_distill
        # dpo/orpo/grpo: what their weights are (their reference model and answers: engine.estimator.memory objective_terms)
        task=cfg.weights,
        weight_precision=wp,
        double_quant=cfg.quant.double_quant,
        training_precision=tp,
        optimizer=cfg.optimizer,
        lora_r=cfg.lora.r,
        lora_targets=cfg.lora.targets,
        lora_dropout=cfg.lora.dropout,
        batch=cfg.micro_batch_size,
        grad_accum=cfg.grad_accum,
        # padded batches are at most max_seq_len long; a packed micro-batch (engine/data/packing.py) holds about
        # micro_batch samples in fewer rows, so micro_batch x max_seq_len tokens per pass bounds it too
        seq_len=cfg.max_seq_len,
        grad_ckpt=cfg.grad_checkpointing,
        distributed=cfg.distributed,  # the estimate is then per GPU
        gpus=cfg.gpus,
    )


def fit_verdict(need_gib: float, capacity_gib: float) -> str:
    """fits / tight / no for a predicted need against a machine's usable capacity."""
    if need_gib <= 0.9 * capacity_gib:
        return "fits"
    return "tight" if need_gib <= capacity_gib else "no"


def _train_targets(spec: str) -> str:
    if spec in ("all-linear", "attention"):
        return spec
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    return ",".join(_SHORT.get(p, p) for p in parts) or "all-linear"


def check_ui_model_ref(ref: str, runs_dir: Path, *, allow_local: bool = False) -> str:
    """Model references accepted from a browser: built-in, run:NAME(/merged), or a Hub id — never a server path,
    unless the app was started with --allow-local-models (a trusted, local `python app.py`), where an
    existing model folder is accepted too."""
    ref = str(ref or "").strip()
    if allow_local and ref.startswith(("/", "~", ".")):
        check_local_model(ref)  # never on a shared app, whatever the caller allowed (engine/sharing.py)
        folder = Path(ref).expanduser()
        if not (folder / "config.json").is_file():
            raise ConfigError("model", ref, allowed_key="error.allowed.model_folder")
        return str(folder.resolve())
    if ref.startswith((BUILTIN_PREFIX, RUN_PREFIX)):
        name = ref.split(":", 1)[1]
        if ref.startswith(RUN_PREFIX) and name.endswith(MERGED_SUFFIX):
            name = name[: -len(MERGED_SUFFIX)]
        if not is_plain_name(name):
            raise ConfigError("model", ref, allowed_key="error.allowed.plain_ref")
        return ref
    if ref.startswith(("/", "~", ".")) or "\\" in ref or ".." in ref or not HUB_MODEL_ID_RE.match(ref):
        raise KeyedConfigError("model", ref, Msg("estimator.allowed.browser_model"))
    return ref


def check_ui_train_config(cfg: TrainConfig, runs_dir: Path, upload_dir: Path | None, *, allow_local_models: bool = False) -> None:
    """Reject browser-supplied configs that name server paths (model folders, arbitrary data files). Model folders
    are accepted with allow_local_models (a trusted local `python app.py --allow-local-models`). upload_dir: the
    caller's own upload folder (a browser session's), None for a caller who cannot upload (an MCP tool): then a dataset
    is built-in or hub:owner/name. Nothing is looked up on the disk before a refusal."""
    check_ui_model_ref(cfg.base_model, runs_dir, allow_local=allow_local_models)
    if cfg.teacher_model:  # checked even when unused (method is not distill): it is saved in the run's config
        try:
            check_ui_model_ref(cfg.teacher_model, runs_dir, allow_local=allow_local_models)
        except ConfigError as exc:
            raise exc.renamed("teacher_model", "TrainConfig") from None
    for name in ("dataset", "eval_dataset"):
        ref = getattr(cfg, name)
        if not ref or ref.startswith(("builtin:", "hub:")):  # hub:owner/name is checked by TrainConfig
            continue
        if upload_dir is None or not Path(ref).resolve().is_relative_to(Path(upload_dir).resolve()):
            raise ConfigError(name, ref, allowed_key="error.allowed.uploaded_dataset", owner="TrainConfig")


def check_ui_estimator_model(ref: str, upload_dir: Path | None) -> str:
    """Estimator model references from a browser or an MCP tool: built-in, manual:..., catalog/Hub id, or a config.json
    uploaded by this caller (upload_dir: the caller's own upload folder, a browser session's; None for a caller who
    cannot upload: every path is refused). The same answer for a refused path whether it exists or not."""
    ref = (ref or "").strip()
    if ref.startswith(("builtin:", "manual:")):
        return ref
    entry = catalog_lookup(ref) if not ref.endswith(".json") and not looks_like_path(ref) else None
    if entry is not None and not HUB_MODEL_ID_RE.match(ref):
        return entry.name  # a name written as people write it ("Llama 3.1 8B"): the catalog model it means
    if ref.endswith(".json") or looks_like_path(ref):
        path = Path(ref).expanduser().resolve()
        if upload_dir is not None and path.is_relative_to(Path(upload_dir).resolve()):
            return str(path)
        raise KeyedConfigError("model", ref, Msg("estimator.allowed.browser_config"))
    return check_ui_model_ref(ref, Path(upload_dir or "."))
