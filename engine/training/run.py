"""The one training path behind every method: QLoRA, LoRA, full fine-tune, from scratch, and distillation.

Built on transformers' Trainer (checkpointing, resume_from_checkpoint, accumulation, AMP, gradient
checkpointing) and peft. Runs headless as `python -m engine train --config run.yaml [--resume]`; the app
starts exactly that as a subprocess (engine/training/jobs.py). Everything the UI needs is written to the run folder
(see engine/runs.py): config.yaml, events.jsonl, train.log, checkpoint-*/, and adapter/ or model/.

`run_training` is the list of steps: start the run → load the models → build the data (engine/data/build.py) →
prepare the model for its method (engine/training/adapters.py) → build the trainer (engine/training/trainer.py) →
train → save → score. Each step writes its events in the same order as it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import QuantSettings, TrainConfig
from ..data.build import TrainData, build_train_data
from ..data.packing import packed_row_multiple
from ..errors import ConfigError, EngineError, RunStopped, TrainingDiverged
from ..hardware import distributed
from ..hardware.device import DeviceInfo, detect_device, master_dtype, peak_memory_gib, peak_reserved_gib, precision_reason, reset_peak
from ..models.references import architecture_ref
from ..objectives import MISTAKES_DATASET, OBJECTIVE_METHODS, PREFERENCE_METHODS
from ..runs import EventLog, atomic_replace_dir, discard_incomplete_checkpoints, last_complete_checkpoint, save_config
from ..sharing import is_shared
from .adapters import prepare_for_method
from .autocast_4bit import autocast_4bit_outputs
from .builtin import ensure_builtin
from .fast_dropout import use_fast_dropout
from .fp32_attention import fp32_attention
from .preflight import check_before_start
from .trainer import RunTrainer, build_trainer

log = logging.getLogger("engine.training.run")

# runs on these are scored on the date task before and after
DATE_TASK_DATASETS = ("builtin:dates", "builtin:preferences", "builtin:feedback", MISTAKES_DATASET)


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


@dataclass
class RunContext:
    """What every step of a run shares: the config, the folders, the device and dtype, and the event log."""

    cfg: TrainConfig
    run_dir: Path
    runs_dir: Path
    device: DeviceInfo
    dtype: torch.dtype
    events: EventLog
    main: bool  # rank 0 (or the only process): it alone writes the run folder
    checkpoint: Path | None  # the checkpoint a resumed run continues from
    started: float


@dataclass
class RunModels:
    """The model to train and its tokenizer, the sequence length they allow, and the distillation setup."""

    model: Any
    tokenizer: Any
    max_len: int
    config_path: Path | None  # config.json of the base model, for the memory prediction
    distill: Any = None  # engine/training/distill.py DistillSetup (student, teacher) for method "distill"


def run_training(cfg: TrainConfig, run_dir: Path, *, runs_dir: Path, resume: bool = False, mirror: EventLog | None = None) -> dict[str, Any]:
    """Train according to `cfg` into `run_dir`; returns the final `done`/`stopped` event.

    Raises EngineError subclasses for problems the user can fix; the caller (CLI) turns them into an
    `error` event and a clean exit code.
    """
    run = _start_run(cfg, Path(run_dir), runs_dir, resume)
    models = _load_models(run)
    _stop_requested(run, mirror, "loading the model")
    prediction = _predict_memory(run, models)
    data = _build_data(run, models)
    cfg = run.cfg  # the data may set the steps (the pairs of the model's own mistakes: engine/training/mistake_data.py)
    _stop_requested(run, mirror, "preparing the data")
    score_task = _score_before(run, models)
    _seed(cfg.seed)  # same seed, same run: the adapters' initial weights come from the seed, not from what ran before
    models.model = prepare_for_method(cfg, models.model, run.events)
    if run.device.kind == "cpu":
        use_fast_dropout(models.model)  # the adapters' dropout: the same masks from cheaper random bits
        autocast_4bit_outputs(models.model)  # QLoRA: 4-bit layers return bf16 under autocast, as Linear does
    built = build_trainer(cfg, run.run_dir, run.device, run.dtype, models.model, models.tokenizer, data, run.events,
                          mirror=mirror, distill=models.distill)
    # after the trainer is built: DPO and GRPO say what they set up (a reference model, answers per prompt) while it is
    # built, and the view shows steps, speed and time left only once the phase is "training"
    run.events.write("phase", phase="training")
    with fp32_attention() if run.device.kind == "cpu" else contextlib.nullcontext():  # see engine/training/fp32_attention.py
        result = built.trainer.train(resume_from_checkpoint=str(run.checkpoint) if run.checkpoint else None)
    peak = max(built.events.peak_gib, peak_memory_gib(run.device) or 0.0)
    if built.nonfinite.step is not None:
        _diverged(run, built)
    if built.stop.stopped:
        return _stopped(run, built, peak)
    eval_loss = _final_eval_loss(built, data)
    if score_task and run.main:
        _score_after(run, models)
    built.tensorboard.close()
    output = _save(run, built, models.tokenizer)
    return run.events.write(
        "done",
        output=output,
        path=str(run.run_dir / output),
        steps=built.trainer.state.global_step,
        final_loss=result.training_loss,  # the mean over the run (the Trainer's training_loss)
        last_loss=next((h["loss"] for h in reversed(built.trainer.state.log_history) if "loss" in h), None),  # the last logged step's
        eval_loss=eval_loss,
        peak_gib=round(peak, 3),
        peak_reserved_gib=peak_reserved_gib(run.device),  # CUDA: allocated + fragmentation (None on a CPU)
        predicted_gib=prediction["predicted_gib"] if prediction else None,
        duration_s=round(time.time() - run.started, 1),
    )


def _seed(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators (transformers' `set_seed`) right before the run draws from them.
    The Trainer seeds them too, but only when it is built, after the LoRA adapters were initialised (peft draws
    lora_A from torch's global generator): their weights then depended on whatever had drawn before in the process
    (the built-in base's pretraining, a tokenizer, a first run in the same process), and two runs of one config
    differed from their second step on (docs/training.md, "Same seed, same run")."""
    from transformers import set_seed

    set_seed(seed)


def _start_run(cfg: TrainConfig, run_dir: Path, runs_dir: Path, resume: bool) -> RunContext:
    """Open the run folder (clear a stale STOP file, drop half-written checkpoints on resume), save the config and
    write the `start` event."""
    device = detect_device()
    # Under `accelerate launch` (engine/hardware/distributed.py) every rank runs this function; rank 0 alone writes
    # the run folder (EventLog and save_config check the rank) and the others wait for it where they read it.
    distributed.init(cpu=device.kind == "cpu")
    main = distributed.is_main_process()
    # Refusals before side effects (engine/training/preflight.py): FSDP without GPUs, or a precision this device or
    # model family cannot train in, is refused before the run folder exists, so a refused command leaves nothing.
    precision = check_before_start(cfg, runs_dir, device)
    model_type, dtype = precision.model_type, precision.dtype
    run_dir.mkdir(parents=True, exist_ok=True)
    removed: list[str] = []
    if main:
        _clear_stale_stop(run_dir / "STOP")
        if resume:
            removed = discard_incomplete_checkpoints(run_dir)
    distributed.barrier()  # ranks > 0 must not look for checkpoints while rank 0 deletes half-written ones
    events = EventLog(run_dir / "events.jsonl")
    save_config(run_dir, cfg)
    checkpoint = last_complete_checkpoint(run_dir) if resume else None
    if removed:
        log.warning("discarded incomplete checkpoints: %s", removed)
    started = time.time()
    events.write("start", run=run_dir.name, method=cfg.method, base_model=cfg.base_model, dataset=cfg.dataset,
                 resumed_from=checkpoint.name if checkpoint else None, device=device.name, device_kind=device.kind, dtype=str(dtype).replace("torch.", ""),
                 precision_note=precision_reason(device, model_type) if cfg.precision == "auto" else f"{cfg.precision}, as chosen",
                 world_size=distributed.world_size(), distributed=distributed.mode(cfg.distributed))
    reset_peak(device)
    return RunContext(cfg, run_dir, runs_dir, device, dtype, events, main, checkpoint, started)


def _clear_stale_stop(stop_file: Path) -> None:
    """Remove a STOP file left over from an earlier session of this run, but not one written for this process: the
    app may ask a run to stop while the process is still importing torch (engine/training/jobs.py clears old ones before it
    launches, and says when it launched in COMPACT_LAB_LAUNCHED_AT)."""
    import os

    launched = float(os.environ.get("COMPACT_LAB_LAUNCHED_AT", "inf"))  # a CLI run: everything before now is stale
    try:
        if stop_file.stat().st_mtime < launched:
            stop_file.unlink()
    except FileNotFoundError:
        pass


# --------------------------------------------------------------------------------------------------
# Model + tokenizer per method
# --------------------------------------------------------------------------------------------------


def _load_models(run: RunContext) -> RunModels:
    """The model and tokenizer of the run's method: a new compact model with a tokenizer trained on the data
    (scratch), a student and its teacher (distill), or the base model (every other method)."""
    cfg, events = run.cfg, run.events
    if cfg.method == "scratch":
        from ..data.build import train_records
        from ..data.formats import record_texts

        events.write("phase", phase="training a tokenizer on the dataset")
        model, tokenizer = _build_scratch(cfg, record_texts(train_records(cfg)))
        models = RunModels(model, tokenizer, min(cfg.max_seq_len, model.config.max_position_embeddings), None)
    elif cfg.method == "distill":
        from .distill import prepare_models

        distill = prepare_models(cfg, run.runs_dir, run.dtype, events, lambda: _load_for_training(cfg, run.runs_dir, run.device, run.dtype, events), pretrain=run_training)
        models = RunModels(distill.student, distill.tokenizer, min(cfg.max_seq_len, distill.context), distill.student_config_path, distill)
    else:
        loaded = _load_for_training(cfg, run.runs_dir, run.device, run.dtype, events)
        model = loaded.model
        max_len = min(cfg.max_seq_len, getattr(model.config, "max_position_embeddings", cfg.max_seq_len) or cfg.max_seq_len)
        models = RunModels(model, loaded.tokenizer, max_len, getattr(loaded, "config_path", None))
    models.tokenizer.padding_side = "right"  # training pads on the right; generation (loaders) uses left
    return models


def _build_scratch(cfg: TrainConfig, texts: list[str]) -> tuple[Any, Any]:
    from ..models.compact import load_compact_preset, new_compact_model
    from ..models.tokenizer import train_tokenizer

    preset = cfg.base_model.split(":", 1)[1]
    wanted = load_compact_preset(preset).vocab_size
    # Several processes: rank 0's tokenizer for all, so every rank builds the same embedding shape.
    tokenizer = distributed.broadcast_object(train_tokenizer(texts, vocab_size=wanted) if distributed.is_main_process() else None)
    return new_compact_model(preset, tokenizer, vocab_size=len(tokenizer), seed=cfg.seed), tokenizer


def _load_for_training(cfg: TrainConfig, runs_dir: Path, device: DeviceInfo, dtype: torch.dtype, events: EventLog) -> Any:
    from ..models.loading import load_model

    if cfg.base_model.startswith("builtin:"):
        ensure_builtin(cfg.base_model.split(":", 1)[1], runs_dir, parent_events=events, pretrain=run_training)
    events.write("phase", phase=f"loading {cfg.base_model}")
    if cfg.weights == "qlora":  # dpo/orpo/grpo by their `tuning`
        quant = dataclasses.replace(cfg.quant, mode="4bit") if cfg.quant.mode == "none" else cfg.quant
    elif cfg.weights == "lora" and cfg.quant.mode == "8bit":  # LoRA on an 8-bit (LLM.int8) base
        quant = dataclasses.replace(cfg.quant, compute_dtype=cfg.precision)
    else:
        quant = QuantSettings(mode="none", compute_dtype=cfg.precision)
    # AMP (fp16 on a GPU, bf16 on a CPU) keeps fp32 master weights of trained weights: engine/hardware/device.py
    load_dtype = master_dtype(cfg.weights, dtype, device)
    # QLoRA under FSDP: the 4-bit weights stored in the compute dtype, so that FSDP can flatten and shard them
    storage = dtype if cfg.distributed == "fsdp" and quant.mode == "4bit" else None
    return load_model(cfg.base_model, quant, runs_dir=runs_dir, trust_remote_code=cfg.trust_remote_code, allow_local_paths=True, dtype=load_dtype,
                      quant_storage=storage)


# --------------------------------------------------------------------------------------------------
# Memory prediction recorded beside the measured peak
# --------------------------------------------------------------------------------------------------


def predict_memory(cfg: TrainConfig, device: DeviceInfo, dtype: torch.dtype, model_config_path: Path | str | None) -> dict[str, Any] | None:
    """The estimator's prediction for this run's settings (None when the model is unknown to it)."""
    from ..estimator.handoff import estimate_train

    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    try:
        est = estimate_train(cfg, name, str(model_config_path) if model_config_path else None, on_cpu=device.kind == "cpu")
    except EngineError as exc:
        log.info("no memory prediction: %s", exc)
        return None
    return {"predicted_gib": round(est.allocated_gib, 3), "predicted_total_gib": round(est.total_gib, 3), "device": device.name}


def _predict_memory(run: RunContext, models: RunModels) -> dict[str, Any] | None:
    """The estimator's prediction for this run, written as the `memory` event (None when the model is unknown)."""
    if run.cfg.method == "distill":  # the student's training + the frozen teacher
        from .distill import predict_memory as predict_distill_memory

        prediction = predict_distill_memory(run.cfg, run.device, run.dtype, models.distill)
    else:
        config_path = models.config_path
        if config_path is not None and is_shared():
            # on a shared app (a Space) the estimator takes no path on the server (engine/refs.py, the visitor gate), and
            # this run's path came from the loader, not a visitor: the reference with the same architecture instead
            config_path = architecture_ref(run.cfg.base_model, run.runs_dir)
        prediction = predict_memory(run.cfg, run.device, run.dtype, config_path)
    if prediction:
        run.events.write("memory", **prediction)
    return prediction


# --------------------------------------------------------------------------------------------------
# Data, task scores, stopping and saving
# --------------------------------------------------------------------------------------------------


def _build_data(run: RunContext, models: RunModels) -> TrainData:
    """The train and eval examples (engine/data/build.py), packed when the models keep packed samples apart; writes
    the `data` event."""
    cfg, events = run.cfg, run.events
    if cfg.method in OBJECTIVE_METHODS:  # preference pairs (dpo, orpo) or prompts (grpo): engine/data/pairs.py
        from ..data.pairs import build_pair_data, build_prompt_data
        from .mistake_data import is_mistake_data, with_mistake_pairs

        found = None
        if is_mistake_data(cfg):  # the pairs of the starting model's own mistakes, made now (engine/training/mistake_data.py)
            cfg, found = with_mistake_pairs(cfg, models.model, models.tokenizer, run.run_dir, events)
            run.cfg = dataclasses.replace(run.cfg, max_steps=cfg.max_steps)
        events.write("phase", phase="tokenizing the data")
        build = build_pair_data if cfg.method in PREFERENCE_METHODS else build_prompt_data
        data = build(cfg, models.tokenizer, models.max_len)
        events.write("data", **data.event_fields(), **({"mistakes": found} if found else {}))
        return data
    pack = cfg.packing and _packing_ok(models.model, events) and (cfg.method != "distill" or _packing_ok(models.distill.teacher, events))
    events.write("phase", phase="tokenizing the data")
    data = build_train_data(cfg, models.tokenizer, models.max_len, pack=pack, row_multiple=packed_row_multiple(cfg.max_seq_len, run.device.kind))
    events.write("data", **data.event_fields())
    if cfg.early_stopping_patience > 0 and not data.evals:
        raise ConfigError("early_stopping_patience", cfg.early_stopping_patience, allowed_key="error.allowed.patience_no_eval", owner="TrainConfig",
                          n=len(data.train))
    return data


def _packing_ok(model: Any, events: EventLog) -> bool:
    """Whether the model keeps packed samples apart (engine/data/packing.py); otherwise say so and pad instead."""
    from ..data.packing import supports_packing

    if supports_packing(model):
        return True
    events.write("phase", phase="packing turned off: this model attends across packed samples (it ignores packed position ids); padding instead")
    return False


def _score_before(run: RunContext, models: RunModels) -> bool:
    """Score the date task before training (and the teacher's score when distilling) when the run trains on it;
    returns whether the run scores it after training too."""
    cfg = run.cfg
    # builtin:preferences pairs half of its rows from the date task: a DPO/ORPO run on it is scored too
    score_task = cfg.dataset in DATE_TASK_DATASETS and cfg.method != "scratch" and run.checkpoint is None
    if score_task:
        # Generation needs no other rank: rank 0 scores, the others wait (same model, same answer).
        if run.main and cfg.method == "distill":
            _task_score(models.distill.teacher, models.tokenizer, run.events, "teacher")  # the score the student is chasing
        if run.main and not (cfg.method == "distill" and cfg.base_model.startswith("builtin:")):  # random weights score ~0: skip
            _task_score(models.model, models.tokenizer, run.events, "before")
        distributed.barrier()
    return score_task


def _score_after(run: RunContext, models: RunModels) -> None:
    if run.cfg.weights == "qlora":
        from ..models.bnb_safety import prepare_for_training

        prepare_for_training(models.model)
    _task_score(models.model, models.tokenizer, run.events, "after")


def _task_score(model: Any, tokenizer: Any, events: EventLog, when: str) -> None:
    from ..inference.tasks import date_items, evaluate_task

    events.write("phase", phase=f"scoring the date task ({when})")
    was_training = model.training
    started = time.monotonic()

    def progress(done: int, total: int) -> None:  # the measurement's own progress and time left, for the progress bar
        elapsed = time.monotonic() - started
        events.write("task_progress", when=when, done=done, total=total, elapsed_s=round(elapsed, 1),
                     eta_s=round(elapsed / done * (total - done), 1) if done else None)

    score = evaluate_task(model, tokenizer, date_items("test"), on_progress=progress)
    model.train(was_training)
    # the first answers and the first misses: the panel shows a few right and a few wrong ones
    events.write("task_score", when=when, accuracy=score.accuracy, n=score.n, seconds=round(time.monotonic() - started, 1), examples=[list(e) for e in score.examples[:3]],
                 misses=[list(e) for e in score.misses[:3]])


def _stop_requested(run: RunContext, mirror: EventLog | None, phase: str) -> None:
    """Honour a Stop between the phases before training proper (the Trainer's callback watches it afterwards):
    RunStopped, which the CLI records as a resumable stop."""
    files = [run.run_dir / "STOP"] + ([Path(mirror.path).parent / "STOP"] if mirror is not None else [])
    if distributed.any_rank(any(f.exists() for f in files)):
        raise RunStopped(f"Stopped while {phase}; Resume starts it again.")


def _stopped(run: RunContext, built: RunTrainer, peak: float) -> dict[str, Any]:
    """End a run stopped by its STOP file: the `stopped` event names the last complete checkpoint to resume from."""
    built.tensorboard.close()
    distributed.barrier()  # rank 0 may still be writing the stop checkpoint
    if run.main:
        (run.run_dir / "STOP").unlink(missing_ok=True)
    last = last_complete_checkpoint(run.run_dir)
    return run.events.write("stopped", step=built.trainer.state.global_step, checkpoint=last.name if last else None, peak_gib=round(peak, 3))


def _diverged(run: RunContext, built: RunTrainer) -> None:
    """Raise TrainingDiverged for a run whose loss became NaN/inf (no checkpoint of those weights was written); the
    CLI records it as the run's `error` event, and the run can be resumed from its last complete checkpoint."""
    built.tensorboard.close()
    nf = built.nonfinite
    last = last_complete_checkpoint(run.run_dir) if run.main else None
    if run.dtype == torch.float16:
        advice = ("fp16 overflow? Try bf16 (a GPU with compute capability 8.0+) or fp32 (precision), or a lower learning rate "
                  f"(now {run.cfg.learning_rate:g})")
    else:
        advice = (f"try a lower learning rate (now {run.cfg.learning_rate:g}) or gradient clipping (max_grad_norm 1.0), "
                  "and check the data for empty or extreme rows")
    where = f"; the last good checkpoint is {last.name}" if last else ""
    raise TrainingDiverged(f"{nf.what} became {'NaN' if nf.value == 'nan' else nf.value} at step {nf.step} — {advice}{where}.")


def _final_eval_loss(built: RunTrainer, data: TrainData) -> float | None:
    """The final eval loss: the periodic evaluation's when it ran at the last step, else one more evaluation
    (EventsCallback writes its `eval` event either way); None without an eval set."""
    if not data.evals or built.trainer.args.eval_strategy == "no":  # GRPO evaluates nothing (engine/training/grpo.py)
        return None
    last_eval = built.events.last_eval
    if last_eval is None or last_eval[0] != built.trainer.state.global_step:
        built.trainer.evaluate()
    return built.events.last_eval[1] if built.events.last_eval else None


def _save(run: RunContext, built: RunTrainer, tokenizer: Any) -> str:
    """Save the adapter (LoRA methods) or the whole model, with the tokenizer, atomically; returns its folder name."""
    run.events.write("phase", phase="saving")
    output = "adapter" if run.cfg.weights in ("qlora", "lora") else "model"
    if run.cfg.method in PREFERENCE_METHODS:
        from .preference import drop_reference_adapter

        drop_reference_adapter(built.trainer.model)  # DPO's frozen copy of the adapter is not part of the result
    if run.main:  # DDP keeps identical weights on every rank: one copy is saved
        tmp = run.run_dir / f".{output}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        built.trainer.model.save_pretrained(str(tmp))
        tokenizer.padding_side = "left"
        tokenizer.save_pretrained(str(tmp))
        atomic_replace_dir(tmp, run.run_dir / output)
    distributed.barrier()  # no rank returns (or loads the output, see ensure_builtin) before it exists
    return output
