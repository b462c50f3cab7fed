"""The Fine-tune form without its widgets: which TrainConfig fields it shows where and with which defaults, the
config its values make, the live memory prediction for it, the command that reproduces it headless, the data check's
tables and the hardware preset's values. Texts come in the visitor's language (`lang`, engine/i18n.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..config import TrainConfig
from ..errors import EngineError
from ..estimator.handoff import check_ui_train_config
from ..fields import from_flat
from ..i18n import fmt_number, t
from ..objectives import OBJECTIVE_METHODS
from ..runs import config_yaml
from .offline import hub_id_of, needs_internet_now, offline_note
from .uploads import keep_upload

if TYPE_CHECKING:
    from ..training.jobs import JobManager

# The form's sections, in the order of its inputs (main fields, then the Training, LoRA, Run and Data accordions): the
# API's order, kept as it was. The page shows them in FT_TOP's order first (what a person chooses: model, method, data,
# how long), then the closed accordions: FT_TRAINING (the usual training knobs) and FT_OPTIMIZER (optimizer details).
FT_MAIN = ["method", "base_model", "teacher_model", "dataset"]
FT_TRAIN = ["max_steps", "epochs", "learning_rate", "lr_scheduler", "warmup_ratio", "micro_batch_size", "grad_accum", "max_seq_len",
            "precision", "grad_checkpointing", "optimizer", "weight_decay", "max_grad_norm", "seed", "eval_fraction", "train_on_prompt",
            "stop_at_loss", "early_stopping_patience", "packing", "distill_temperature", "distill_alpha", "distributed", "gpus",
            # DPO, ORPO, GRPO (issue 27): shown for the methods that use them (OBJECTIVE_ONLY)
            "tuning", "beta", "reward", "num_generations", "max_completion_length", "sampling_temperature"]
FT_TOP = ["base_model", "method", "teacher_model", "dataset", "max_steps", "epochs", "tuning"]
FT_OPTIMIZER = ["optimizer", "lr_scheduler", "warmup_ratio", "weight_decay", "max_grad_norm", "seed"]
FT_TRAINING = [n for n in FT_TRAIN if n not in FT_TOP and n not in FT_OPTIMIZER]
FT_LORA = ["lora.r", "lora.alpha", "lora.dropout", "lora.targets", "lora.use_rslora", "lora.use_dora", "quant.mode", "quant.quant_type",
           "quant.double_quant", "quant.compute_dtype"]
FT_RUN = ["logging_steps", "save_steps", "eval_steps", "save_total_limit", "sample_generations", "run_name", "trust_remote_code"]
FT_DATA = ["hub_config", "hub_split", "columns", "too_long", "eval_dataset", "eval_split", "curriculum", "difficulty_column"]
DATA_FILE_TYPES = [".jsonl", ".json", ".csv", ".txt", ".parquet"]
DISTILL_ONLY = ("teacher_model", "distill_temperature", "distill_alpha")  # shown for method 'distill' only
# shown only for the methods that use them: which weights dpo/orpo/grpo train, DPO/ORPO's beta, GRPO's rewards and answers
OBJECTIVE_ONLY: dict[str, tuple[str, ...]] = {
    "tuning": ("dpo", "orpo", "kto", "grpo"),
    "beta": ("dpo", "orpo", "kto"),
    "reward": ("grpo",),
    "num_generations": ("grpo",),
    "max_completion_length": ("grpo",),
    "sampling_temperature": ("grpo",),
}
# What a person starting one of these methods from the form gets: the settings measured on the date task on a 2-core CPU
# (docs/preference.md has the tables), from an SFT run (run:NAME) of the built-in model at 22-23% date accuracy, every
# weight trained. DPO at 5e-5 fell to 11% (both answers' likelihoods fell), at 1e-5 it held (22%); GRPO with the
# exact-match reward alone at 2e-4 fell to 17%, at 3e-5 it held (23%), and with the partial-credit reward added it
# reached 27% and 26% (seeds 1, 2): a small gain within one run's noise on 100 dates. ORPO on the pairs of the model's
# own mistakes (builtin:date-mistakes), with its cross-entropy on the answer only (engine/training/preference.py), raised
# it 22% -> 51% in 250 steps (median of 3 seeds, +29, pairs from dates the SFT run never saw): the largest gain of the
# preference methods, and less than continued supervised training gives for as many steps (22% -> 63%): its supervised
# term does the work. From a run at 88% it holds the task (86%: the pairs are capped at 4 passes, mistake_data.py).
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    "dpo": {"dataset": "builtin:preferences", "tuning": "full", "learning_rate": 1e-5, "beta": 0.1, "micro_batch_size": 8, "max_seq_len": 128,
            "max_steps": 150},
    # ORPO (docs/preference.md): on the pairs of the model's own mistakes, 250 steps at 2e-4 took the date task 22% -> 51% (median of 3 seeds)
    "orpo": {"dataset": "builtin:date-mistakes", "tuning": "full", "learning_rate": 2e-4, "beta": 0.1, "micro_batch_size": 8, "max_seq_len": 72,
             "max_steps": 250},
    # KTO (docs/preference.md): 30 steps at 5e-5 held the date task (23%, 21%, 20%) and turned the held-out good-vs-bad margin positive (3 of 3 seeds)
    "kto": {"dataset": "builtin:feedback", "tuning": "full", "learning_rate": 5e-5, "beta": 0.1, "micro_batch_size": 8, "max_seq_len": 128,
            "max_steps": 30},
    "grpo": {"dataset": "builtin:dates", "tuning": "full", "learning_rate": 3e-5, "reward": "dates, date_parts", "num_generations": 8,
             "max_completion_length": 16, "sampling_temperature": 1.0, "micro_batch_size": 16, "max_seq_len": 72, "max_steps": 150},
}

def visible_fields(method: str) -> dict[str, bool]:
    """Which method-specific fields the form shows for `method` (the distillation fields and OBJECTIVE_ONLY's)."""
    shown = {n: method == "distill" for n in DISTILL_ONLY}
    shown.update({n: method in methods for n, methods in OBJECTIVE_ONLY.items()})
    return shown


def method_help(method: str, lang: str = "en") -> str:
    """The line under the Method field for the method picked: what it does and what data it needs, in `lang`."""
    return t(f"method_help.{method}", lang) if method in TrainConfig.__dataclass_fields__["method"].metadata.get("choices_help", {}) else ""


def method_values(method: str, jobs: JobManager | None = None, owner: str | None = None) -> dict[str, Any]:
    """The values the form sets when a person picks `method`: METHOD_DEFAULTS for dpo/orpo/grpo (the measured settings),
    nothing for the others (their form defaults stay). With `jobs`, the newest finished run that learned the date task
    becomes the base (engine/views/preference_base.py; on a shared app one of `owner`'s): these methods refine a model
    that does the task."""
    values = dict(METHOD_DEFAULTS.get(method, {}))
    if values and jobs is not None:
        from .preference_base import learned_run

        run = learned_run(jobs, owner)
        if run is not None:
            values["base_model"] = f"run:{run.name}"
    return values
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
    if method in OBJECTIVE_METHODS:  # dpo/orpo/grpo: their `tuning` names the weights (LoRA, QLoRA or all)
        method = values.get("tuning") or "lora"
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


def memory_prediction(cfg: TrainConfig, runs_dir: Path | None = None, lang: str = "en", card: str | None = None) -> tuple[str, str | None]:
    """(markdown in `lang`, verdict) of the estimator for this form on the machine the run will use. On a GPU the
    prediction is what PyTorch allocates there; on a CPU it is the model's training alone (weights, gradients, optimizer,
    activations), while the run measures the whole process (Python and PyTorch included). card: the hardware tier the
    settings were planned for in the estimator (its hand-off), whose prediction is shown beside this machine's."""
    text, verdict = _this_machine_prediction(cfg, runs_dir, lang)
    if card and verdict is not None:
        text += "\n\n" + card_prediction(cfg, card, runs_dir, lang)
    return text, verdict


def card_prediction(cfg: TrainConfig, card: str, runs_dir: Path | None = None, lang: str = "en") -> str:
    """One line in `lang`: this form's memory on the card `card` (a hardware tier of presets/hardware.yaml) the settings
    were planned for, in the precision that card computes in (the device policy of engine/hardware/device.py asked about
    a stand-in of that card), against its usable memory; or why that card refuses the precision."""
    from ..errors import ConfigError
    from ..estimator.catalog import tier_by_name
    from ..estimator.handoff import estimate_train, fit_verdict
    from ..estimator.texts import tier_name
    from ..hardware.device import dtype_name, resolve_dtype

    tier = tier_by_name(card)
    name = tier_name(tier, lang)
    device = tier_device(tier)
    try:
        dtype = dtype_name(resolve_dtype(cfg.precision, device, field="precision", model_type=form_model_type(cfg, runs_dir) if device.gpu_policy else None))
    except ConfigError as exc:
        return t("right_first_try.card_refused", lang, card=name, why=exc.render(lang))
    est = estimate_train(cfg, dtype, on_cpu=tier.kind == "cpu")
    # what that card must hold: the estimate with that card's own CUDA context (or runtime, on a CPU card) in place of the calibration's
    need = (est.resident_gib if tier.kind != "cpu" else est.total_gib) - est.breakdown_gib.get("CUDA context", 0.0) + tier.cuda_context_gib
    verdict = fit_verdict(need, tier.usable_gib)
    word = {"fits": "✔ ", "tight": "⚠ ", "no": "✖ "}[verdict] + t(f"finetune.predict.verdict.{verdict}", lang)
    return t("right_first_try.card_prediction", lang, card=name, need=fmt_number(round(need, 2), lang), usable=fmt_number(round(tier.usable_gib, 1), lang, 1),
             dtype=dtype, word=word)


def tier_device(tier: Any) -> Any:
    """A stand-in DeviceInfo of a hardware tier, for the device policy: a GPU with bf16 (compute capability 8.0) or without
    (7.5, a T4's), or a CPU (auto computes in fp32 there unless that CPU is measured fast at bf16)."""
    from ..hardware.device import DeviceInfo

    if tier.kind == "cpu":
        return DeviceInfo("cpu", tier.label, tier.total_gib, True, None)
    return DeviceInfo("cuda", tier.label, tier.total_gib, tier.bf16, (8, 0) if tier.bf16 else (7, 5), bf16_fast=tier.bf16)


def _this_machine_prediction(cfg: TrainConfig, runs_dir: Path | None = None, lang: str = "en") -> tuple[str, str | None]:
    """memory_prediction for this machine alone."""
    from ..estimator.handoff import estimate_train, fit_verdict
    from ..hardware.device import detect_device, dtype_name, precision_reason, resolve_dtype

    device = detect_device()
    model_type = form_model_type(cfg, runs_dir) if device.kind == "cuda" else None
    dtype = resolve_dtype(cfg.precision, device, field="precision", model_type=model_type)
    why = precision_reason(device, model_type, lang) if cfg.precision == "auto" else t("finetune.predict.as_chosen", lang)
    head = t("finetune.predict.head", lang, batch=fmt_number(cfg.micro_batch_size * cfg.grad_accum, lang), micro=fmt_number(cfg.micro_batch_size, lang),
             accum=fmt_number(cfg.grad_accum, lang), dtype=dtype_name(dtype), why=why)
    if cfg.base_model.startswith("run:"):
        return head + " " + t("finetune.predict.later_run", lang), None
    if cfg.method == "distill":  # the student's training plus the frozen teacher (engine/training/distill.py)
        from ..training.distill import estimate_distill

        est = estimate_distill(cfg, dtype_name(dtype))
        if est is None:
            return head + " " + t("finetune.predict.later_teacher", lang), None
    else:
        est = estimate_train(cfg, dtype_name(dtype), on_cpu=device.kind == "cpu")  # + DPO/ORPO/GRPO's lines
    # on a GPU what must stay resident decides (paged optimizer state pages out to CPU RAM: slower, not out of memory)
    need = est.resident_gib if device.kind == "cuda" else est.allocated_gib
    verdict = fit_verdict(need, device.total_gib)
    word = {"fits": "✔ ", "tight": "⚠ ", "no": "✖ "}[verdict] + t(f"finetune.predict.verdict.{verdict}", lang)
    gib = {"pred": fmt_number(round(est.allocated_gib, 2), lang), "total": fmt_number(round(est.total_gib, 2), lang)}
    line = t("finetune.predict.gpu" if device.kind == "cuda" else "finetune.predict.cpu", lang, **gib)
    where = t("finetune.predict.device", lang, device=device.name, kind=device.kind, gib=fmt_number(round(device.total_gib, 1), lang, 1), word=word)
    if cfg.method in OBJECTIVE_METHODS:  # DPO's reference model, GRPO's generated answers (engine/estimator/objectives.py)
        from ..estimator.objectives import objective_line

        line += (" · " + objective_line(est, lang)) if objective_line(est, lang) else ""
    return f"{head}\n\n{line} · {where}" + ("" if verdict == "fits" else " — " + t("finetune.predict.make_it_fit", lang)), verdict


def prediction_or_warning(config: Callable[[], TrainConfig], runs_dir: Path | None = None, lang: str = "en", card: str | None = None,
                          jobs: JobManager | None = None, owner: str | None = None) -> str:
    """memory_prediction's text for the config that config() makes (with the planned `card`'s line); an engine error
    (making the config or predicting) as a warning line instead, in `lang`: the prediction updates as the form changes
    and never raises. With `jobs`, a preference method's base is judged too (engine/views/preference_base.py
    `base_note`: what it scores on the date task)."""
    try:
        cfg = config()
        refused = space_refusal(cfg, runs_dir)  # a Space's limit refuses it at Start: said now, instead of "fits"
        text = f"⚠ {t('space_predict.refused', lang, reason=refused.render(lang))}" if refused else memory_prediction(cfg, runs_dir, lang, card)[0]
    except EngineError as exc:
        return f"⚠ {exc.render(lang)}"
    notes = [offline_note(ref, lang) for ref in models_to_download(cfg)]  # offline: said before Start, with the alternative
    notes.append(lora_builtin_note(cfg, lang))
    if jobs is not None:
        from .preference_base import base_note

        notes.append(base_note(cfg, jobs, lang, owner))
    return "\n\n".join([*filter(None, notes), text])


# A LoRA/QLoRA of the built-in 2M-parameter model on the date task: measured at 0% after 500 steps at every learning
# rate from 1e-3 to 3e-2 (presets/recipes.yaml), where full fine-tuning reaches 92%: said before Start.
LORA_NOT_LEARNING = ("builtin:compact-mini", "builtin:dates")


def lora_builtin_note(cfg: TrainConfig, lang: str = "en") -> str:
    """The warning for a LoRA/QLoRA run whose base and data are LORA_NOT_LEARNING's, with what to pick instead; else ""."""
    if cfg.method not in ("lora", "qlora") or (cfg.base_model, cfg.dataset) != LORA_NOT_LEARNING:
        return ""
    return "⚠ " + t("finetune.predict.lora_builtin", lang, method=cfg.method.upper(), base=cfg.base_model)


def data_refusal(config: Callable[[], TrainConfig], lang: str = "en") -> str:
    """The line beside the data field after Start was refused: the data check's refusal in `lang` (what Start met,
    engine/training/preflight.py check_data_before_start), or empty when the data is not what stopped it."""
    from ..training.preflight import check_data_before_start

    try:
        cfg = config()
    except EngineError:
        return ""  # the form itself was refused (the toast says why): not the data
    try:
        check_data_before_start(cfg)
    except EngineError as exc:
        return "⚠ " + t("right_first_try.data_refused", lang, why=exc.render(lang))
    return ""


def space_refusal(cfg: TrainConfig, runs_dir: Path | None) -> EngineError | None:
    """On a Space in demo mode, the limit (steps, epochs, sequence length, model size: engine/space.py) that Start would
    refuse this config with; None when it is within them, and always outside demo mode."""
    from .. import space
    from ..refs import default_runs_dir

    try:
        space.check_train_config(cfg, Path(runs_dir or default_runs_dir()))
    except EngineError as exc:
        return exc
    return None


def models_to_download(cfg: TrainConfig) -> list[str]:
    """The models a run of `cfg` loads that may come from the Hub: the base, and the teacher when distilling."""
    return [cfg.base_model] + ([cfg.teacher_model] if cfg.method == "distill" and cfg.teacher_model else [])


def check_reachable(cfg: TrainConfig) -> None:
    """Before a run starts: a keyed ModelLoadError at once when a model it needs would be downloaded and this app has no
    internet (instead of a failed run half a minute later, after the Hub's retries)."""
    from ..models.hub_access import check_hub_model

    for ref in models_to_download(cfg):
        if needs_internet_now(ref):
            check_hub_model(hub_id_of(ref) or ref)


def reproduce_command(cfg: TrainConfig, lang: str = "en") -> str:
    """The run's config as YAML, headed by the commands that train it without the app (one GPU, then two), the comments
    in `lang`."""
    from ..hardware.distributed import launch_command

    if cfg.distributed != "none":  # the config asks for several GPUs: the launcher is the command
        return (f"# {t('finetune.command.save', lang)}\n"
                f"# {t('finetune.command.gpus', lang, gpus=cfg.gpus, mode=cfg.distributed)}\n"
                f"#   {launch_command('run.yaml', cfg.gpus)}\n{config_yaml(cfg)}")
    return (f"# {t('finetune.command.save', lang)}\n#   python -m engine train --config run.yaml\n"
            f"# {t('finetune.command.two_gpus', lang)}\n"
            f"#   {launch_command('run.yaml', 2)}\n{config_yaml(cfg)}")


CHECK_COLUMNS = ("row", "text", "tokens", "trained")  # the first rows' table (finetune.check.col.*)
DROPPED_COLUMNS = ("row", "why")  # the dropped rows' table


def check_headers(columns: tuple[str, ...], lang: str = "en") -> list[str]:
    """The data check tables' column names in `lang`."""
    return [t(f"finetune.check.col.{c}", lang) for c in columns]


def data_check(cfg: TrainConfig, runs_dir: Path, lang: str = "en") -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The data check of the form's dataset, in `lang`: summary, first rows (row, text as the model sees it, tokens,
    trained tokens), token-length histogram (tokens, rows) and dropped rows (row, why); the tables' headers travel
    with them."""
    from ..training.data_check import inspect_dataset

    ins = inspect_dataset(cfg, runs_dir, lang=lang)
    rows = [[p["row"], p["text"], p["n_tokens"], p["n_trainable"]] for p in ins.preview]
    return (ins.summary, pd.DataFrame(rows, columns=check_headers(CHECK_COLUMNS, lang)), pd.DataFrame(ins.histogram, columns=["tokens", "rows"]),
            pd.DataFrame(ins.dropped or [], columns=check_headers(DROPPED_COLUMNS, lang)))


def preset_values(values: dict[str, Any], tier: str | None) -> tuple[str, dict[str, Any]]:
    """The hardware preset (recipes.AUTO when none is picked) adapted to the form's base model: (explanation, the form
    values it sets)."""
    from ..estimator.recipes import AUTO, apply_recipe

    applied = apply_recipe(values, tier or AUTO, values["base_model"])
    return applied.explanation, applied.values
