"""The one training path behind every method: QLoRA, LoRA, full fine-tune, from scratch, and distillation.

Built on transformers' Trainer (checkpointing, resume_from_checkpoint, accumulation, AMP, gradient
checkpointing) and peft. Runs headless as `python -m engine train --config run.yaml [--resume]`; the app
starts exactly that as a subprocess (engine/training/jobs.py). Everything the UI needs is written to the run folder
(see engine/runs.py): config.yaml, events.jsonl, train.log, checkpoint-*/, and adapter/ or model/.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from ..config import LoraSettings, QuantSettings, TrainConfig
from ..errors import ConfigError, EngineError
from ..hardware import distributed
from ..hardware.device import DeviceInfo, detect_device, peak_memory_gib, reset_peak, resolve_dtype
from ..runs import EventLog, atomic_replace_dir, discard_incomplete_checkpoints, last_complete_checkpoint, save_config
from .builtin import ensure_builtin
from .callbacks import EvalPatienceCallback, EventsCallback, StopAtLossCallback, StopFileCallback

log = logging.getLogger("engine.training.run")

OPTIMIZERS = {
    "adamw": "adamw_torch_fused",  # transformers 5 default on torch >= 2.8; no step temporary (engine/estimator/memory.py)
    "adamw-8bit": "adamw_bnb_8bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
    "paged-adamw-32bit": "paged_adamw_32bit",
    "sgd": "sgd",
}
# Attention projection names across common architectures (for LoRA targets = "attention").
ATTENTION_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "c_attn", "c_proj", "query_key_value", "qkv_proj", "Wqkv", "out_proj")


# --------------------------------------------------------------------------------------------------
# Model + tokenizer per method
# --------------------------------------------------------------------------------------------------


def _lora_targets(model: torch.nn.Module, spec: str) -> str | list[str]:
    if spec == "all-linear":
        return "all-linear"
    leaf_names = {name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear) or "Linear" in type(mod).__name__}
    wanted = [n for n in ATTENTION_NAMES if n in leaf_names] if spec == "attention" else spec.split(",")
    missing = [n for n in wanted if n not in leaf_names]
    if not wanted or missing:
        raise ConfigError("lora.targets", spec, "module names that exist in this model: " + ", ".join(sorted(leaf_names)))
    return wanted


def _apply_lora(model: Any, lora: LoraSettings) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=_lora_targets(model, lora.targets),
        use_rslora=lora.use_rslora,
        use_dora=lora.use_dora,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def _is_peft(model: Any) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def _continue_adapter(model: Any, events: EventLog) -> Any:
    """Train the adapter of a previous LoRA run further (base_model = run:NAME), instead of stacking a second
    adapter on it: the result is one adapter on the first run's base (engine/models/references.py resolves it so).
    The adapter keeps its own shape (rank, alpha, targets): the form's LoRA settings do not apply."""
    n = 0
    for name, param in model.named_parameters():
        if "lora_" in name:
            param.requires_grad_(True)
            n += param.numel()
    if n == 0:
        raise ConfigError("base_model", "run:…", "a run whose adapter has LoRA weights to continue")
    peft_cfg = model.peft_config[model.active_adapter]
    events.write("phase", phase=f"continuing the previous run's adapter (r={peft_cfg.r}, alpha={peft_cfg.lora_alpha}, "
                 f"{n:,} trainable weights); the LoRA settings of this form are not used")
    return model


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
    if cfg.method == "qlora":
        quant = dataclasses.replace(cfg.quant, mode="4bit") if cfg.quant.mode == "none" else cfg.quant
    elif cfg.method == "lora" and cfg.quant.mode == "8bit":  # LoRA on an 8-bit (LLM.int8) base
        quant = dataclasses.replace(cfg.quant, compute_dtype=cfg.precision)
    else:
        quant = QuantSettings(mode="none", compute_dtype=cfg.precision)
    # Full fine-tuning (a pretrained distill student too) with fp16 AMP needs fp32 master weights; everything else
    # loads in the compute dtype.
    load_dtype = torch.float32 if (cfg.method in ("full", "distill") and dtype == torch.float16) else dtype
    return load_model(cfg.base_model, quant, runs_dir=runs_dir, trust_remote_code=cfg.trust_remote_code, allow_local_paths=True, dtype=load_dtype)


# --------------------------------------------------------------------------------------------------
# Memory prediction recorded beside the measured peak
# --------------------------------------------------------------------------------------------------


def predict_memory(cfg: TrainConfig, device: DeviceInfo, dtype: torch.dtype, model_config_path: Path | None) -> dict[str, Any] | None:
    """The estimator's prediction for this run's settings (None when the model is unknown to it)."""
    from ..estimator.handoff import query_from_train
    from ..estimator.memory import estimate

    name = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    try:
        est = estimate(query_from_train(cfg, name, str(model_config_path) if model_config_path else None))
    except EngineError as exc:
        log.info("no memory prediction: %s", exc)
        return None
    return {"predicted_gib": round(est.allocated_gib, 3), "predicted_total_gib": round(est.total_gib, 3), "device": device.name}


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def _training_args(cfg: TrainConfig, run_dir: Path, device: DeviceInfo, dtype: torch.dtype, has_eval: bool) -> Any:
    from transformers import TrainingArguments

    on_cpu = device.kind == "cpu"
    eval_every = cfg.eval_steps or cfg.save_steps  # 0 = evaluate with every checkpoint
    patience = has_eval and cfg.early_stopping_patience > 0
    return TrainingArguments(
        output_dir=str(run_dir),
        per_device_train_batch_size=cfg.micro_batch_size,
        per_device_eval_batch_size=cfg.micro_batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_ratio,  # transformers 5: a float < 1 is a ratio of the total steps
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps if cfg.max_steps > 0 else -1,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm if cfg.max_grad_norm > 0 else 0.0,
        optim=OPTIMIZERS[cfg.optimizer],
        bf16=dtype == torch.bfloat16 and not on_cpu,
        fp16=dtype == torch.float16,
        use_cpu=on_cpu,
        activation_checkpointing=cfg.grad_checkpointing,  # transformers 5 name of gradient checkpointing
        activation_checkpointing_kwargs={"use_reentrant": False} if cfg.grad_checkpointing else None,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        eval_strategy="steps" if has_eval else "no",
        eval_steps=eval_every if has_eval else None,
        metric_for_best_model="eval_loss" if patience else None,  # EarlyStoppingCallback compares this
        greater_is_better=False if patience else None,
        seed=cfg.seed,
        data_seed=cfg.seed,
        train_sampling_strategy="random" if cfg.curriculum == "none" else "sequential",  # a curriculum is never shuffled
        report_to="none",
        include_num_input_tokens_seen="non_padding",
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def _prepare_data(cfg: TrainConfig, tokenizer: Any, max_len: int, events: EventLog, pack: bool = False) -> tuple[list, list, dict]:
    from ..data.packing import arrange_train
    from ..data.records import chunk_corpus, record_texts, split_eval, tokenize_records
    from ..data.sources import eval_examples, train_records

    recordset = train_records(cfg)  # file, built-in or hub:..., after the column mapping
    chunked = cfg.method == "scratch" or recordset.format == "text"
    tok = None
    if chunked:
        texts = record_texts(recordset)
        examples = chunk_corpus(texts, tokenizer, max_len)
        report = {"rows_in": len(recordset.records), "blocks": len(examples), "block_size": max_len}
    else:
        tok = tokenize_records(recordset, tokenizer, max_len, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
        examples = tok.examples
        report = dataclasses.asdict(tok.report) if dataclasses.is_dataclass(tok.report) else dict(tok.report)
    if not examples:
        raise EngineError(f"No usable training examples in {cfg.dataset}: every row was dropped (see the data report).")
    if cfg.eval_dataset:  # a separate eval set replaces the held-out fraction
        evals, eval_info = eval_examples(cfg, tokenizer, max_len, chunked=chunked)
        train = examples
        report.update(eval_info)
    else:
        train, evals = split_eval(examples, cfg.eval_fraction, cfg.seed) if cfg.eval_fraction > 0 and len(examples) >= 10 else (examples, [])
    report.update({"train_examples": len(train), "eval_examples": len(evals)})
    # curriculum order and packing (engine/data/packing.py); the eval set stays unpacked, its loss comparable across runs
    train, arranged = arrange_train(cfg, train, examples=examples, recordset=recordset, report=tok.report if tok else None,
                                    max_len=max_len, chunked=chunked, pack=pack)
    report.update(arranged)
    events.write("data", **{k: v for k, v in report.items() if k != "dropped"}, dropped=len(report.get("dropped", []) or []))
    return train, evals, report


def _packing_ok(model: Any, events: EventLog) -> bool:
    """Whether the model keeps packed samples apart (engine/data/packing.py); otherwise say so and pad instead."""
    from ..data.packing import supports_packing

    if supports_packing(model):
        return True
    events.write("phase", phase="packing turned off: this model attends across packed samples (it ignores packed position ids); padding instead")
    return False


def _task_score(model: Any, tokenizer: Any, events: EventLog, when: str) -> None:
    from ..inference.tasks import date_items, evaluate_task

    events.write("phase", phase=f"scoring the date task ({when})")
    was_training = model.training
    score = evaluate_task(model, tokenizer, date_items("test"))
    model.train(was_training)
    events.write("task_score", when=when, accuracy=score.accuracy, n=score.n, examples=[list(e) for e in score.examples[:3]])


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


def _tensorboard_callback(cfg: TrainConfig, run_dir: Path, device: DeviceInfo, tokenizer: Any, eval_ds: list, events: EventLog) -> Any:
    from ..runs import config_yaml
    from .tensorboard import TB_DIRNAME, TensorBoardLogCallback, sample_prompts

    prompts = sample_prompts(eval_ds) if cfg.sample_generations else []
    return TensorBoardLogCallback(run_dir / TB_DIRNAME, device, tokenizer=tokenizer, prompts=prompts, config_text=config_yaml(cfg), events=events)


def run_training(cfg: TrainConfig, run_dir: Path, *, runs_dir: Path, resume: bool = False, mirror: EventLog | None = None) -> dict[str, Any]:
    """Train according to `cfg` into `run_dir`; returns the final `done`/`stopped` event.

    Raises EngineError subclasses for problems the user can fix; the caller (CLI) turns them into an
    `error` event and a clean exit code.
    """
    from transformers import Trainer

    from ..data.packing import PackingCollator

    run_dir = Path(run_dir)
    device = detect_device()
    # Under `accelerate launch` (engine/hardware/distributed.py) every rank runs this function; rank 0 alone writes
    # the run folder (EventLog and save_config check the rank) and the others wait for it where they read it.
    distributed.init(cpu=device.kind == "cpu")
    main = distributed.is_main_process()
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
    t0 = time.time()
    dtype = resolve_dtype(cfg.precision, device)
    events.write("start", run=run_dir.name, method=cfg.method, base_model=cfg.base_model, dataset=cfg.dataset,
                 resumed_from=checkpoint.name if checkpoint else None, device=device.name, device_kind=device.kind, dtype=str(dtype).replace("torch.", ""),
                 world_size=distributed.world_size())
    reset_peak(device)

    if cfg.method == "scratch":
        from ..data.records import record_texts
        from ..data.sources import train_records

        events.write("phase", phase="training a tokenizer on the dataset")
        model, tokenizer = _build_scratch(cfg, record_texts(train_records(cfg)))
        max_len = min(cfg.max_seq_len, model.config.max_position_embeddings)
        model_cfg_path = None
    elif cfg.method == "distill":
        from .distill import prepare_models

        distill = prepare_models(cfg, runs_dir, dtype, events, lambda: _load_for_training(cfg, runs_dir, device, dtype, events), pretrain=run_training)
        model, tokenizer, model_cfg_path = distill.student, distill.tokenizer, distill.student_config_path
        max_len = min(cfg.max_seq_len, distill.context)
    else:
        loaded = _load_for_training(cfg, runs_dir, device, dtype, events)
        model, tokenizer = loaded.model, loaded.tokenizer
        max_len = min(cfg.max_seq_len, getattr(model.config, "max_position_embeddings", cfg.max_seq_len) or cfg.max_seq_len)
        model_cfg_path = getattr(loaded, "config_path", None)
    tokenizer.padding_side = "right"  # training pads on the right; generation (loaders) uses left

    if cfg.method == "distill":  # the student's training + the frozen teacher
        from .distill import predict_memory as predict_distill_memory

        pred = predict_distill_memory(cfg, device, dtype, distill)
    else:
        pred = predict_memory(cfg, device, dtype, model_cfg_path)
    if pred:
        events.write("memory", **pred)

    pack = cfg.packing and _packing_ok(model, events) and (cfg.method != "distill" or _packing_ok(distill.teacher, events))
    events.write("phase", phase="tokenizing the data")
    train_ds, eval_ds, _ = _prepare_data(cfg, tokenizer, max_len, events, pack=pack)
    if cfg.early_stopping_patience > 0 and not eval_ds:
        raise ConfigError("early_stopping_patience", cfg.early_stopping_patience,
                          f"0 (off) here: no eval set was held out ({len(train_ds)} training examples; the eval fraction needs at least 10, "
                          "or set an eval dataset)")

    score_task = cfg.dataset == "builtin:dates" and cfg.method != "scratch" and checkpoint is None
    if score_task:
        # Generation needs no other rank: rank 0 scores, the others wait (same model, same answer).
        if main and cfg.method == "distill":
            _task_score(distill.teacher, tokenizer, events, "teacher")  # the score the student is chasing
        if main and not (cfg.method == "distill" and cfg.base_model.startswith("builtin:")):  # random weights score ~0: skip
            _task_score(model, tokenizer, events, "before")
        distributed.barrier()

    if cfg.method == "qlora" or (cfg.method == "lora" and cfg.quant.mode == "8bit"):
        from peft import prepare_model_for_kbit_training

        from ..models.bnb_safety import prepare_for_training

        prepare_for_training(model)  # undo/prevent the bitsandbytes CPU repack (design.md §6 hazard)
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=cfg.grad_checkpointing, gradient_checkpointing_kwargs={"use_reentrant": False}
        )
    if cfg.method in ("qlora", "lora"):
        model = _continue_adapter(model, events) if _is_peft(model) else _apply_lora(model, cfg.lora)
    else:
        if _is_peft(model):  # full fine-tune of a LoRA run: train the merged weights
            events.write("phase", phase=f"merging the adapter of {cfg.base_model} into its base before the full fine-tune")
            model = model.merge_and_unload()
            model.requires_grad_(True)  # the adapter was loaded for inference, with every base weight frozen
        if cfg.grad_checkpointing:
            model.config.use_cache = False

    events.write("phase", phase="training")
    stop_cb = StopFileCallback(run_dir / "STOP")
    events_cb = EventsCallback(events, device, mirror=mirror)
    tb_cb = _tensorboard_callback(cfg, run_dir, device, tokenizer, eval_ds, events)
    extra = [EvalPatienceCallback(cfg.early_stopping_patience, events)] if cfg.early_stopping_patience > 0 else []
    trainer_cls, extra_args = Trainer, {}
    if cfg.method == "distill":
        from .distill import DistillTrainer

        trainer_cls, extra_args = DistillTrainer, {"distill": distill, "temperature": cfg.distill_temperature, "alpha": cfg.distill_alpha}
    trainer = trainer_cls(
        model=model,
        args=_training_args(cfg, run_dir, device, dtype, has_eval=bool(eval_ds)),
        train_dataset=train_ds,
        eval_dataset=eval_ds or None,
        data_collator=PackingCollator(tokenizer, pad_to_multiple_of=8),  # packed rows, or padded examples as before
        processing_class=tokenizer,
        callbacks=[events_cb, stop_cb, StopAtLossCallback(cfg.stop_at_loss, events), tb_cb, *extra],
        **extra_args,
    )
    result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    peak = max(events_cb.peak_gib, peak_memory_gib(device) or 0.0)

    if stop_cb.stopped:
        tb_cb.close()
        distributed.barrier()  # rank 0 may still be writing the stop checkpoint
        if main:
            (run_dir / "STOP").unlink(missing_ok=True)
        last = last_complete_checkpoint(run_dir)
        return events.write("stopped", step=trainer.state.global_step, checkpoint=last.name if last else None, peak_gib=round(peak, 3))

    eval_loss = None
    if eval_ds:
        # the final eval loss: the periodic evaluation's when it ran at the last step, else one more evaluation
        # (EventsCallback writes its `eval` event either way)
        if events_cb.last_eval is None or events_cb.last_eval[0] != trainer.state.global_step:
            trainer.evaluate()
        eval_loss = events_cb.last_eval[1] if events_cb.last_eval else None
    if score_task and main:
        if cfg.method == "qlora":
            from ..models.bnb_safety import prepare_for_training

            prepare_for_training(model)
        _task_score(model, tokenizer, events, "after")
    tb_cb.close()

    events.write("phase", phase="saving")
    output = "adapter" if cfg.method in ("qlora", "lora") else "model"
    if main:  # DDP keeps identical weights on every rank: one copy is saved
        tmp = run_dir / f".{output}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        trainer.model.save_pretrained(str(tmp))
        tokenizer.padding_side = "left"
        tokenizer.save_pretrained(str(tmp))
        atomic_replace_dir(tmp, run_dir / output)
    distributed.barrier()  # no rank returns (or loads the output, see ensure_builtin) before it exists
    return events.write(
        "done",
        output=output,
        path=str(run_dir / output),
        steps=trainer.state.global_step,
        final_loss=result.training_loss,
        eval_loss=eval_loss,
        peak_gib=round(peak, 3),
        predicted_gib=pred["predicted_gib"] if pred else None,
        duration_s=round(time.time() - t0, 1),
    )
