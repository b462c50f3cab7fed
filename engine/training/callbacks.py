"""Trainer callbacks: progress events for the UI, and a cooperative stop that saves before exiting.

transformers' Trainer already does the loop, accumulation, AMP, checkpointing and resume; these
callbacks only *report* (events.jsonl, polled by the UI) and *listen* (a STOP file dropped by the job
manager), which the Trainer has no notion of. Early stopping is transformers' own callback, with an event
added so the UI's log says why a run ended early. (TensorBoard logging: engine/training/tensorboard.py.)
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from transformers import EarlyStoppingCallback, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..hardware.device import DeviceInfo, peak_memory_gib
from ..hardware.distributed import any_rank
from ..runs import EventLog

log = logging.getLogger("engine.training.run")

# What DPO, ORPO, KTO and GRPO optimise, as trl logs it -> the `progress` event's field (engine/views/run_charts.py plots
# them; TensorBoard gets trl's own names): the margin between the chosen and the rejected answers' implicit rewards and
# how often the chosen one wins; GRPO's mean reward over the sampled answers, its spread and the answers' length.
OBJECTIVE_METRICS = {
    "rewards/margins": "reward_margin",
    "rewards/accuracies": "pref_accuracy",
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "completions/mean_length": "completion_len",
    "kl": "kl",  # KTO's estimate of the KL between the model and its reference (its rewards are measured against it)
}


class EventsCallback(TrainerCallback):
    """Writes one `progress` event per logging step and one `eval` event per evaluation."""

    def __init__(self, events: EventLog, device: DeviceInfo, mirror: EventLog | None = None) -> None:
        self.events = events
        self.mirror = mirror  # the parent run's log while pretraining a built-in base for it
        self.device = device
        self.t0 = time.time()
        self.step0 = 0
        self.last_t = self.t0
        self.last_tokens = 0
        self.peak_gib = 0.0
        self.last_eval: tuple[int, float] | None = None  # (step, eval loss) of the latest evaluation
        self.scaler: Any = None  # the fp16 run's GradScaler (engine/training/trainer.py sets it), else None
        self.loss_scale: float | None = None  # its scale after the latest optimizer step
        self.skipped_steps = 0  # optimizer steps skipped on inf/NaN gradients in this process

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        # A GradScaler halves its scale exactly when it skipped a step on inf/NaN gradients, with every optimizer
        # (a fused AdamW skips inside its kernel, where accelerate's `step_was_skipped` cannot see it).
        if self.scaler is None or not self.scaler.is_enabled():
            return
        scale = float(self.scaler.get_scale())
        if self.loss_scale is not None and scale < self.loss_scale:
            self.skipped_steps += 1
        self.loss_scale = scale

    def _write(self, type_: str, **data: Any) -> None:
        self.events.write(type_, **data)
        if self.mirror is not None:
            self.mirror.write("base_" + type_, **data)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self.t0 = self.last_t = time.time()
        self.step0 = state.global_step  # > 0 when resuming
        self.last_tokens = state.num_input_tokens_seen
        if self.scaler is not None and self.scaler.is_enabled():  # its initial scale, or the checkpoint's on resume
            self.loss_scale = float(self.scaler.get_scale())

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: dict | None = None, **kw: Any) -> None:
        logs = logs or {}
        now = time.time()
        if "eval_loss" in logs:
            loss = logs["eval_loss"]
            self.last_eval = (state.global_step, loss)
            # DPO/ORPO/KTO: how often the chosen answer wins on the held-out pairs (the headline of a run on pairs)
            extra = {ours: _finite(logs[f"eval_{theirs}"]) for theirs, ours in OBJECTIVE_METRICS.items() if f"eval_{theirs}" in logs}
            self._write("eval", step=state.global_step, eval_loss=loss, perplexity=_ppl(loss), **extra)
            return
        if "loss" not in logs:
            return
        done = state.global_step - self.step0
        elapsed = now - self.t0
        eta = (elapsed / done) * (state.max_steps - state.global_step) if done > 0 else None
        # trl's DPO and GRPO count their tokens themselves (`num_tokens`: their batches hold no input_ids to count)
        tokens = state.num_input_tokens_seen or int(logs.get("num_tokens") or 0)
        dt = max(now - self.last_t, 1e-9)
        tok_s = (tokens - self.last_tokens) / dt
        self.last_t, self.last_tokens = now, tokens
        mem = peak_memory_gib(self.device)
        if mem is not None:
            self.peak_gib = max(self.peak_gib, mem)
        self._write(
            "progress",
            step=state.global_step,
            max_steps=state.max_steps,
            epoch=round(state.epoch or 0.0, 4),
            loss=_finite(logs.get("loss")),
            lr=logs.get("learning_rate"),
            grad_norm=_finite(logs.get("grad_norm")),
            tokens_per_s=round(tok_s, 1),
            tokens_seen=tokens,
            elapsed_s=round(elapsed, 1),
            eta_s=None if eta is None else round(eta, 1),
            mem_gib=None if mem is None else round(mem, 3),
            # the two parts of a distillation loss (engine/training/distill.py), when there is one
            **{k: _finite(logs[k]) for k in ("kd_loss", "ce_loss") if k in logs},
            # fp16 mixed precision: the grad scaler's scale and the steps it skipped (inf/NaN gradients)
            **({"loss_scale": self.loss_scale, "skipped_steps": self.skipped_steps} if self.loss_scale is not None else {}),
            **{ours: _finite(logs[theirs]) for theirs, ours in OBJECTIVE_METRICS.items() if theirs in logs},
        )


class StopAtLossCallback(TrainerCallback):
    """Ends training normally (final save included) once the logged training loss reaches a threshold."""

    def __init__(self, threshold: float, events: EventLog) -> None:
        self.threshold = threshold
        self.events = events

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: dict | None = None, **kw: Any) -> None:
        # The logged loss is already averaged over all ranks by the Trainer, so every rank decides alike.
        loss = _finite((logs or {}).get("loss"))
        if self.threshold > 0 and loss is not None and loss <= self.threshold and not control.should_training_stop:
            self.events.write("phase", phase=f"loss {loss:.4f} reached the stop-at-loss threshold {self.threshold}: finishing")
            control.should_training_stop = True


class EvalPatienceCallback(EarlyStoppingCallback):
    """transformers' EarlyStoppingCallback (stop once eval loss has not improved for `patience` evaluations
    in a row), writing an `early_stop` event and a phase when it fires.

    It needs `metric_for_best_model="eval_loss"` (train.py sets it) but deliberately not
    `load_best_model_at_end`: that option demands save_steps be a multiple of eval_steps and reloads a
    checkpoint that only exists when an evaluation fell on a save step, so we keep the model at the stop
    and report the best step (whose checkpoint save_total_limit then never deletes, see Trainer's
    best_model_checkpoint). The parent only warns about the missing option in train.log.
    """

    def __init__(self, patience: int, events: EventLog) -> None:
        super().__init__(early_stopping_patience=patience)
        self.events = events

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, metrics: dict | None = None, **kw: Any) -> None:
        already = control.should_training_stop
        # state.best_metric is still the best *before* this evaluation (Trainer updates it afterwards).
        best_before, best_step = state.best_metric, state.best_global_step
        super().on_evaluate(args, state, control, metrics=metrics or {}, **kw)
        if not control.should_training_stop or already or not state.is_world_process_zero:
            return
        loss = _finite((metrics or {}).get("eval_loss"))
        # a NaN/inf eval loss never "improves" either; NonFiniteLossCallback ends such a run as failed, but this message
        # must not fail on it (nor on a first best that is still None)
        message = (f"early stopping: eval loss has not improved for {self.early_stopping_patience} evaluation(s) "
                   f"(now {_fmt(loss)}, best {_fmt(_finite(best_before))} at step {best_step}); finishing at step {state.global_step}")
        self.events.write("early_stop", step=state.global_step, eval_loss=loss, best_eval_loss=_finite(best_before),
                          best_step=best_step, patience=self.early_stopping_patience)
        self.events.write("phase", phase=message)
        log.warning(message)


class NonFiniteLossCallback(TrainerCallback):
    """Ends training at the first logged training or eval loss that is NaN or infinite, without saving a checkpoint
    of the diverged weights; the run then raises TrainingDiverged (engine/training/run.py) and ends as failed, so its
    last complete checkpoint (from before the overflow) stays the one a resume would use.

    The Trainer hides such losses by default (`logging_nan_inf_filter` replaces them with the running average, so a
    run that is all NaN logs 0.0 and goes on for hours); engine/training/trainer.py turns that filter off so this
    callback sees them."""

    def __init__(self) -> None:
        self.step: int | None = None  # the step at which a non-finite loss was first logged
        self.what = ""  # "loss" | "eval loss"
        self.value = ""  # "nan" | "inf" | "-inf"

    def _check(self, state: TrainerState, control: TrainerControl, what: str, value: Any) -> None:
        if value is None or self.step is not None:
            return
        try:
            x = float(value)
        except (TypeError, ValueError):
            return
        if math.isfinite(x):
            return
        self.step, self.what, self.value = state.global_step, what, str(x)
        control.should_training_stop = True
        control.should_save = False  # never checkpoint weights that may already hold NaN
        control.should_evaluate = False

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs: dict | None = None, **kw: Any) -> None:
        logs = logs or {}
        # The logged loss is averaged over every rank (and eval loss gathered), so each rank decides alike.
        self._check(state, control, "loss", logs.get("loss"))
        self._check(state, control, "eval loss", logs.get("eval_loss"))

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, metrics: dict | None = None, **kw: Any) -> None:
        self._check(state, control, "eval loss", (metrics or {}).get("eval_loss"))


class StopFileCallback(TrainerCallback):
    """Stops at the next optimizer step when `<run>/STOP` exists, saving a checkpoint first so that a
    stopped run resumes exactly where it was (no lost work). `also`: more STOP files that stop it too (the built-in
    base's pretraining listens to the STOP file of the run that asked for it)."""

    def __init__(self, stop_file: Path, *also: Path) -> None:
        self.stop_file = Path(stop_file)
        self.also = [Path(p) for p in also]
        self.stopped = False

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        # Several processes (accelerate launch): the file may appear between two ranks' checks, and a rank
        # that stops alone leaves the others waiting in DDP's all-reduce for ever. Every rank reaches this
        # point once per optimizer step, so one MAX all-reduce gives all of them the same answer.
        if any_rank(self.stop_file.exists() or any(p.exists() for p in self.also)):
            self.stopped = True
            control.should_save = True
            control.should_training_stop = True


def _finite(x: Any) -> float | None:
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _fmt(x: float | None) -> str:
    return "not a number" if x is None else f"{x:.4f}"


def _ppl(loss: Any) -> float | None:
    loss = _finite(loss)
    if loss is None or loss > 50:
        return None
    return round(math.exp(loss), 3)
