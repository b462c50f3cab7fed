"""GRPO: learning from the model's own answers, scored by built-in rewards (method "grpo", `trl.GRPOTrainer`).

For every prompt the model writes `num_generations` answers (sampled at `sampling_temperature`, at most
`max_completion_length` tokens); the rewards (engine/training/rewards.py, weighted as `reward` says) score them, and
each answer is pushed up or down by how much better it did than its group's mean. No reference model: trl's KL
term is off (beta 0, trl's default), so LoRA, QLoRA and full runs hold one model.

Built with the run's TrainingArguments, callbacks (events, STOP file, TensorBoard) and atomic checkpoints
(engine/training/trainer.py), so stop, resume, zip, merge, GGUF export and push work as for SFT. The prompts arrive
as the chat template's text (engine/data/pairs.py `build_prompt_data`), with the reference answer for the `dates`
reward. A few answers of each logging step, with their rewards, go to the run's events (`completions`) and log.
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from ..config import TrainConfig
from ..runs import EventLog
from .rewards import RewardRecorder

log = logging.getLogger("engine.training.run")


class CompletionsCallback(TrainerCallback):
    """Writes a `completions` event (a few sampled answers with their rewards) at every logging step, and the same
    lines to train.log: what the numbers on the reward plot look like as text."""

    def __init__(self, recorder: RewardRecorder, events: EventLog) -> None:
        self.recorder, self.events = recorder, events
        self.last_step = -1

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
        if not state.is_world_process_zero or state.global_step == self.last_step or "loss" not in (logs or {}):
            return
        samples = self.recorder.samples()
        if not samples:
            return
        self.last_step = state.global_step
        self.events.write("completions", step=state.global_step, samples=samples)
        for s in samples:
            log.info("step %d reward %+.3f answer %r (expected %r)", state.global_step, s["reward"], s["completion"][:120], s["answer"])


def grpo_trainer(cfg: TrainConfig, args: dict[str, Any], model: Any, tokenizer: Any, data: Any, callbacks: list, events: EventLog, *,
                 mixins: tuple[type, ...]) -> Any:
    """The trl GRPOTrainer of a run over `data` (engine/data/pairs.py `build_prompt_data`), with the run's TrainingArguments
    keywords `args`, its callbacks, and `mixins` (atomic checkpoints...) before trl's class."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    recorder = RewardRecorder(cfg.reward)
    train = Dataset.from_list([{"prompt": e["prompt"], "answer": e["answer"]} for e in data.train])
    # no eval pass: an eval "loss" of GRPO means nothing; the date task's score before and after is the measure
    # trl counts the tokens itself (the batches carry prompt_ids, not input_ids, which the Trainer's count looks for)
    args = {**args, "eval_strategy": "no", "eval_steps": None, "metric_for_best_model": None, "greater_is_better": None,
            "include_num_input_tokens_seen": "no"}
    config = GRPOConfig(
        **args,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.sampling_temperature,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        reward_weights=recorder.weights,
        log_completions=False,  # trl prints a rich table; ours go to events.jsonl and train.log (CompletionsCallback)
    )
    cls = type("RunGRPOTrainer", (*mixins, GRPOTrainer), {})
    events.write("phase", phase=f"GRPO: {cfg.num_generations} answers per prompt, rewards {cfg.reward}")
    return cls(model=model, reward_funcs=recorder.functions, args=config, train_dataset=train, processing_class=tokenizer,
               callbacks=[*callbacks, CompletionsCallback(recorder, events)])
