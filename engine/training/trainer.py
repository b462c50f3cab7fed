"""Building the transformers Trainer of a run: its TrainingArguments, callbacks (events, STOP file, stop-at-loss,
TensorBoard, eval patience), the collator, and the distillation trainer for method "distill".
"""

from __future__ import annotations

import gc
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import TrainConfig
from ..hardware.device import DeviceInfo
from ..objectives import OBJECTIVE_METHODS, PREFERENCE_METHODS
from ..runs import EventLog, config_yaml
from .callbacks import EvalPatienceCallback, EventsCallback, NonFiniteLossCallback, StopAtLossCallback, StopFileCallback
from .tensorboard import SAMPLE_PROMPTS, TB_DIRNAME, TensorBoardLogCallback, sample_prompts

OPTIMIZERS = {
    "adamw": "adamw_torch_fused",  # transformers 5 default on torch >= 2.8; no step temporary (engine/estimator/memory.py)
    "adamw-8bit": "adamw_bnb_8bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
    "paged-adamw-32bit": "paged_adamw_32bit",
    "sgd": "sgd",
}


def training_args(cfg: TrainConfig, run_dir: Path, device: DeviceInfo, dtype: torch.dtype, has_eval: bool) -> Any:
    """The TrainingArguments of a run: batch, schedule, precision, checkpoints, evaluation and the sampling order.
    With packing too, a micro-batch is `micro_batch_size` samples: the collator packs them (engine/data/packing.py)."""
    from transformers import TrainingArguments

    return TrainingArguments(**training_kwargs(cfg, run_dir, device, dtype, has_eval))


def training_kwargs(cfg: TrainConfig, run_dir: Path, device: DeviceInfo, dtype: torch.dtype, has_eval: bool) -> dict[str, Any]:
    """`training_args`'s keyword arguments: trl's configs (DPOConfig, ORPOConfig, GRPOConfig) are TrainingArguments
    subclasses and take the same ones, plus their method's own (engine/training/preference.py, grpo.py)."""
    on_cpu = device.kind == "cpu"
    eval_every = cfg.eval_steps or cfg.save_steps  # 0 = evaluate with every checkpoint
    patience = has_eval and cfg.early_stopping_patience > 0
    return dict(
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
        # on CPU bf16=True is the Trainer's CPU AMP (bf16 autocast over fp32 master weights: device.master_dtype)
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu=on_cpu,
        activation_checkpointing=cfg.grad_checkpointing,  # transformers 5 name of gradient checkpointing
        activation_checkpointing_kwargs={"use_reentrant": False} if cfg.grad_checkpointing else None,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        logging_nan_inf_filter=False,  # a NaN/inf loss must reach NonFiniteLossCallback, not be averaged away
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
        **fsdp_args(cfg),
    )


def fsdp_args(cfg: TrainConfig) -> dict[str, Any]:
    """The TrainingArguments that turn on accelerate's FSDP plugin for `distributed: fsdp` (none otherwise): FSDP2
    (transformers 5's default), FULL_SHARD (weights resharded after each layer's forward), one unit per decoder layer
    (TRANSFORMER_BASED_WRAP: the model's `_no_split_modules`), a full state dict for the checkpoints and the saved
    model. The Trainer itself gives a peft model peft's wrap policy and, for 4-bit weights stored in a float dtype
    (engine/training/run.py), the matching mixed precision. Data parallel (ddp) needs nothing: it is what the Trainer
    does under `accelerate launch`."""
    if cfg.distributed != "fsdp":
        return {}
    return {"fsdp": True, "fsdp_config": {
        "version": 2, "reshard_after_forward": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "state_dict_type": "FULL_STATE_DICT",
        "cpu_ram_efficient_loading": False}}


def _tensorboard_callback(cfg: TrainConfig, run_dir: Path, device: DeviceInfo, tokenizer: Any, eval_ds: list, events: EventLog) -> TensorBoardLogCallback:
    if not cfg.sample_generations:
        prompts = []
    elif cfg.method in PREFERENCE_METHODS:  # pairs (engine/data/pairs.py): the prompt is its own column
        prompts = [list(e["prompt_ids"]) for e in list(eval_ds)[:SAMPLE_PROMPTS]]
    elif cfg.method in OBJECTIVE_METHODS:  # GRPO prompts are the template's text
        prompts = [tokenizer(e["prompt"], add_special_tokens=False)["input_ids"] for e in list(eval_ds)[:SAMPLE_PROMPTS]]
    else:
        prompts = sample_prompts(eval_ds)
    return TensorBoardLogCallback(run_dir / TB_DIRNAME, device, tokenizer=tokenizer, prompts=prompts, config_text=config_yaml(cfg), events=events)


class AtomicCheckpoints:
    """Mixed into the run's Trainer: each checkpoint is written whole into `<run>/.checkpoint-staging/checkpoint-N` and
    only then renamed to `<run>/checkpoint-N`, so a process killed mid-save (a Colab runtime that disconnects, with the
    runs folder on Drive) never leaves a folder under a checkpoint's name that resume could pick. The Trainer has no
    option for this; it writes checkpoint-N in place, weights first and trainer_state.json last."""

    _staging: str | None = None

    def _get_output_dir(self, trial: Any) -> str:
        return self._staging or super()._get_output_dir(trial)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        from transformers.trainer_utils import rotate_checkpoints

        from ..runs import CHECKPOINT_STAGING, atomic_replace_dir

        run_dir = Path(super()._get_output_dir(trial))
        name = f"checkpoint-{self.state.global_step}"
        staging = run_dir / CHECKPOINT_STAGING
        if self.args.should_save:
            shutil.rmtree(staging / name, ignore_errors=True)  # a leftover of a save that died at this very step
        self.accelerator.wait_for_everyone()
        self._staging = str(staging)
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging = None
        self.accelerator.wait_for_everyone()  # every rank has written its part (RNG states) into the staging folder
        if not self.args.should_save:
            return
        best = self.state.best_model_checkpoint
        if best and Path(best).parent == staging:  # the Trainer named the staging folder as the best one: name its final place
            self.state.best_model_checkpoint = str(run_dir / Path(best).name)
            self.state.save_to_json(str(staging / name / "trainer_state.json"))
        atomic_replace_dir(staging / name, run_dir / name)
        try:
            staging.rmdir()  # empty now; left only by a save that did not finish
        except OSError:
            pass
        rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit,
                           best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)


class CountedParameters:
    """Mixed into a run's `Trainer`: the parameter count behind the Trainer's FLOP tally (`total_flos`) counted once,
    not at every step. transformers' `floating_point_ops` walks every module and parameter of the model per
    micro-batch (`num_parameters(exclude_embeddings=True)`: 2-3 ms a step, 2% of a tiny Llama's LoRA step on a
    CPU); the count cannot change while a run trains, so the tally is the same number."""

    _counted: tuple[Any, int] | None = None

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        main_input = getattr(self.model, "main_input_name", "input_ids")
        if main_input not in inputs or not hasattr(self.model, "num_parameters"):
            return super().floating_point_ops(inputs)
        if self._counted is None or self._counted[0] is not self.model:
            self._counted = (self.model, self.model.num_parameters(exclude_embeddings=True))
        return 6 * inputs[main_input].numel() * self._counted[1]


class FrozenStartupObjects:
    """Mixed into a run's `Trainer`: the objects that exist when training starts (the imported modules, the model,
    the data) are frozen out of Python's garbage collector while `train()` runs. The Trainer starts with a full
    `gc.collect()` (accelerate's `free_memory`), which otherwise scans them all to find nothing: a quarter of a second
    of every run (8% of a one-epoch tiny Llama LoRA run on a CPU). Objects made while training are collected as
    usual, and everything is unfrozen afterwards (no leak in a long-lived process that trains several times). A
    process that froze objects itself is left alone."""

    def train(self, *args: Any, **kwargs: Any) -> Any:
        if gc.get_freeze_count():
            return super().train(*args, **kwargs)
        gc.freeze()
        try:
            return super().train(*args, **kwargs)
        finally:
            gc.unfreeze()


def trainer_class(method: str) -> type:
    """The Trainer class of a run of `method`: transformers' `Trainer` (the `DistillTrainer` for "distill") with
    atomic checkpoints, the start-up objects frozen out of the garbage collector while it trains
    (`FrozenStartupObjects`), the parameter count of the FLOP tally made once (`CountedParameters`), fp16 mixed
    precision with a grad scaler when an fp16 run is on a CPU (`CpuFp16Amp`, engine/training/cpu_fp16.py) and, except for
    distillation (whose loss needs every position's logits), the loss computed on the scored positions only
    (engine/training/loss.py)."""
    from transformers import Trainer

    from .cpu_fp16 import CpuFp16Amp
    from .loss import ScoredPositionsLoss

    if method == "distill":
        from .distill import DistillTrainer

        return type("AtomicDistillTrainer", (AtomicCheckpoints, FrozenStartupObjects, CountedParameters, CpuFp16Amp, DistillTrainer), {})
    return type("AtomicScoredTrainer", (AtomicCheckpoints, FrozenStartupObjects, CountedParameters, CpuFp16Amp, ScoredPositionsLoss, Trainer), {})


@dataclass
class RunTrainer:
    """The Trainer of a run and the callbacks the run reads after `train()`: stopped?, peak memory, last eval, TensorBoard."""

    trainer: Any
    stop: StopFileCallback
    events: EventsCallback
    tensorboard: TensorBoardLogCallback
    nonfinite: NonFiniteLossCallback


def build_trainer(
    cfg: TrainConfig,
    run_dir: Path,
    device: DeviceInfo,
    dtype: torch.dtype,
    model: Any,
    tokenizer: Any,
    data: Any,
    events: EventLog,
    *,
    mirror: EventLog | None = None,
    distill: Any = None,
) -> RunTrainer:
    """The Trainer for `model` on `data` (engine/data/build.py `TrainData`); a `DistillTrainer` with the frozen
    teacher of `distill` (engine/training/distill.py `DistillSetup`) for method "distill"."""
    from ..data.packing import PackingCollator, packed_row_multiple

    # a mirrored run is the built-in base pretrained for another run: that run's Stop stops it too
    stop_cb = StopFileCallback(run_dir / "STOP", *([Path(mirror.path).parent / "STOP"] if mirror is not None else []))
    nonfinite_cb = NonFiniteLossCallback()
    events_cb = EventsCallback(events, device, mirror=mirror)
    tb_cb = _tensorboard_callback(cfg, run_dir, device, tokenizer, data.evals, events)
    extra = [EvalPatienceCallback(cfg.early_stopping_patience, events)] if cfg.early_stopping_patience > 0 else []
    callbacks = [nonfinite_cb, events_cb, stop_cb, StopAtLossCallback(cfg.stop_at_loss, events), tb_cb, *extra]
    if cfg.method in OBJECTIVE_METHODS:  # DPO, ORPO, GRPO: trl's trainers, with the same callbacks and checkpoints
        if cfg.method in PREFERENCE_METHODS:
            from .preference import preference_trainer as objective_trainer
        else:
            from .grpo import grpo_trainer as objective_trainer
        trainer = objective_trainer(cfg, training_kwargs(cfg, run_dir, device, dtype, has_eval=bool(data.evals)), model, tokenizer, data,
                                    callbacks, events, mixins=(AtomicCheckpoints, FrozenStartupObjects))
        return RunTrainer(trainer, stop_cb, events_cb, tb_cb, nonfinite_cb)
    extra_args = {"distill": distill, "temperature": cfg.distill_temperature, "alpha": cfg.distill_alpha} if cfg.method == "distill" else {}
    trainer = trainer_class(cfg.method)(
        model=model,
        args=training_args(cfg, run_dir, device, dtype, has_eval=bool(data.evals)),
        train_dataset=data.train,
        eval_dataset=data.evals or None,
        # each micro-batch packed (rows in a few widths on a CPU), or padded examples (the eval set, packing off)
        data_collator=PackingCollator(tokenizer, pad_to_multiple_of=8, packed_multiple=packed_row_multiple(cfg.max_seq_len, device.kind)),
        processing_class=tokenizer,
        callbacks=callbacks,
        **extra_args,
    )
    events_cb.scaler = trainer.accelerator.scaler  # fp16 runs: the loss scale and skipped steps go into progress events
    return RunTrainer(trainer, stop_cb, events_cb, tb_cb, nonfinite_cb)
