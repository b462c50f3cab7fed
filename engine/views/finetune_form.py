"""The Fine-tune form without its widgets: which TrainConfig fields it shows where and with which defaults, the
config its values make, the live memory prediction for it, the command that reproduces it headless, the data check's
tables and the hardware preset's values."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import TrainConfig
from ..errors import EngineError
from ..estimator import memory
from ..estimator.handoff import check_ui_train_config
from ..fields import from_flat
from ..runs import config_yaml
from .uploads import keep_upload

# The form's sections, in the order of its inputs (main fields, then the Training, LoRA, Run and Data accordions).
FT_MAIN = ["method", "base_model", "teacher_model", "dataset"]
FT_TRAIN = ["max_steps", "epochs", "learning_rate", "lr_scheduler", "warmup_ratio", "micro_batch_size", "grad_accum", "max_seq_len",
            "precision", "grad_checkpointing", "optimizer", "weight_decay", "max_grad_norm", "seed", "eval_fraction", "train_on_prompt",
            "stop_at_loss", "early_stopping_patience", "packing", "distill_temperature", "distill_alpha"]
FT_LORA = ["lora.r", "lora.alpha", "lora.dropout", "lora.targets", "lora.use_rslora", "lora.use_dora", "quant.mode", "quant.quant_type",
           "quant.double_quant", "quant.compute_dtype"]
FT_RUN = ["logging_steps", "save_steps", "eval_steps", "save_total_limit", "sample_generations", "run_name", "trust_remote_code"]
FT_DATA = ["hub_config", "hub_split", "columns", "too_long", "eval_dataset", "eval_split", "curriculum", "difficulty_column"]
DATA_FILE_TYPES = [".jsonl", ".json", ".csv", ".txt", ".parquet"]
DISTILL_ONLY = ("teacher_model", "distill_temperature", "distill_alpha")  # shown for method 'distill' only
# The offline first run: fully fine-tune the built-in compact model (shipped pretrained: no pretraining first) on the
# scored date task. max_seq_len 72 holds every date row whole (50-69 tokens with its tokenizer; at 64, 170 of the 600
# rows lost the end of their answer and its end token, which capped accuracy at ~75% even after 1000 steps).
# Measured with `python -m engine train` and these values on a shared 2-core CPU (AMD EPYC, bf16 autocast): date accuracy
# 0% -> 92% (seeds 1 and 2: 87%, 90%) and `2023-09-05` for the README's example; 0.11-0.15 s a step while the CPU was
# free, i.e. ~65-85 s from Start to the end of training (~10 s of it start-up, loading and scoring), several times
# more while other jobs loaded the machine. The former 1000 steps at 64 tokens: 0% -> 77% in about twice the time.
# LoRA on a 2M-parameter model needs several times more steps for the same skill.
FT_DEFAULTS = {"method": "full", "base_model": "builtin:compact-mini", "dataset": "builtin:dates", "max_steps": 500,
               "learning_rate": 1e-3, "micro_batch_size": 16, "max_seq_len": 72, "logging_steps": 10, "save_steps": 200}


def train_config_from_form(values: dict[str, Any], upload_path: str | None, eval_path: str | None, *, upload_dir: Path, runs_dir: Path,
                           allow_local_models: bool = False) -> TrainConfig:
    """The checked TrainConfig for the form's values (dotted names) and its optional dataset and eval uploads."""
    values = dict(values)
    if upload_path:
        values["dataset"] = str(keep_upload(upload_path, upload_dir, suffixes=DATA_FILE_TYPES))
    if eval_path:
        values["eval_dataset"] = str(keep_upload(eval_path, upload_dir, suffixes=DATA_FILE_TYPES))
    # qlora always loads the base in 4-bit; lora may use an 8-bit base; full/scratch train unquantized weights
    method, mode = values.get("method"), values.get("quant.mode")
    values["quant.mode"] = "4bit" if method == "qlora" else ("8bit" if method == "lora" and mode == "8bit" else "none")
    cfg = from_flat(TrainConfig, values)
    check_ui_train_config(cfg, runs_dir, upload_dir, allow_local_models=allow_local_models)
    return cfg


def form_model_type(cfg: TrainConfig, runs_dir: Path | None) -> str | None:
    """The base model's model_type as the estimator knows it (catalog, Hub config, built-in preset), a run's through
    its base (None when unknown): what the dtype policy's family rule needs, so the form, the estimator and the run
    (engine/training/run.py reads the same config.json) pick the same precision."""
    from ..estimator.model_config import resolve
    from ..models.references import architecture_ref
    from ..refs import default_runs_dir

    try:
        return resolve(architecture_ref(cfg.base_model, Path(runs_dir or default_runs_dir()))).model_type or None
    except EngineError:
        return None


def memory_prediction(cfg: TrainConfig, runs_dir: Path | None = None) -> tuple[str, str | None]:
    """(markdown, verdict) of the estimator for this form on the machine the run will use."""
    from ..estimator.handoff import fit_verdict, query_from_train
    from ..hardware.device import detect_device, dtype_name, precision_reason, resolve_dtype

    device = detect_device()
    model_type = form_model_type(cfg, runs_dir) if device.kind == "cuda" else None
    dtype = resolve_dtype(cfg.precision, device, field="precision", model_type=model_type)
    why = precision_reason(device, model_type) if cfg.precision == "auto" else "as chosen"
    head = (f"Effective batch **{cfg.micro_batch_size * cfg.grad_accum}** (micro batch {cfg.micro_batch_size} × accumulation {cfg.grad_accum}) · "
            f"precision **{dtype_name(dtype)}** ({why}).")
    if cfg.base_model.startswith("run:"):
        return head + " Memory prediction: shown once the run starts (the base comes from a previous run).", None
    if cfg.method == "distill":  # the student's training plus the frozen teacher (engine/training/distill.py)
        from ..training.distill import estimate_distill

        est = estimate_distill(cfg, dtype_name(dtype))
        if est is None:
            return head + " Memory prediction: shown once the run starts (the teacher's architecture is not known yet).", None
    else:
        est = memory.estimate(query_from_train(cfg, dtype_name(dtype), on_cpu=device.kind == "cpu"))
    need = est.total_gib if device.kind == "cuda" else est.allocated_gib
    verdict = fit_verdict(need, device.total_gib)
    word = {"fits": "✅ fits", "tight": "⚠ tight", "no": "❌ does not fit"}[verdict]
    return (f"{head}\n\nPredicted peak **{est.allocated_gib:.2f} GiB** allocated ({est.total_gib:.2f} GiB as nvidia-smi shows it) · "
            f"{device.name} ({device.kind}, {device.total_gib:.1f} GiB): **{word}**"
            + ("" if verdict == "fits" else " — the Memory estimator's *Make it fit* lists the cheapest changes.")), verdict


def prediction_or_warning(config: Callable[[], TrainConfig], runs_dir: Path | None = None) -> str:
    """memory_prediction's text for the config that config() makes; an engine error (making the config or predicting)
    as a warning line instead: the prediction updates as the form changes and never raises."""
    try:
        return memory_prediction(config(), runs_dir)[0]
    except EngineError as exc:
        return f"⚠ {exc}"


def reproduce_command(cfg: TrainConfig) -> str:
    """The run's config as YAML, headed by the commands that train it without the app (one GPU, then two)."""
    from ..hardware.distributed import launch_command

    return (f"# save as run.yaml, then:\n#   python -m engine train --config run.yaml\n"
            f"# on 2 GPUs (one process each; each step then sees 2x the effective batch; see docs/multi_gpu.md):\n"
            f"#   {launch_command('run.yaml', 2)}\n{config_yaml(cfg)}")


def data_check(cfg: TrainConfig, runs_dir: Path) -> tuple[str, list[list[Any]], pd.DataFrame, list[list[Any]]]:
    """The data check of the form's dataset: summary, first rows (row, text as the model sees it, tokens, trained
    tokens), token-length histogram and dropped rows."""
    from ..training.data_check import inspect_dataset

    ins = inspect_dataset(cfg, runs_dir)
    rows = [[p["row"], p["text"], p["n_tokens"], p["n_trainable"]] for p in ins.preview]
    return ins.summary, rows, pd.DataFrame(ins.histogram, columns=["tokens", "rows"]), ins.dropped or []


def preset_values(values: dict[str, Any], tier: str | None) -> tuple[str, dict[str, Any]]:
    """The hardware preset (recipes.AUTO when none is picked) adapted to the form's base model: (explanation, the form
    values it sets)."""
    from ..estimator.recipes import AUTO, apply_recipe

    applied = apply_recipe(values, tier or AUTO, values["base_model"])
    return applied.explanation, applied.values
