"""A Space's limits as one table of data (presets/space_limits.yaml), and the checks of what a run would cost.

engine/space.py decides when the limits apply (demo mode) and checks the base model's size; this module reads the
table, builds the limits in force (`limits`: the defaults, each replaced by its owner's variable), and checks every
field of a run that costs the Space time or memory (`check_run_cost`): steps, epochs, sequence length, the tokens one
forward pass holds, the processes (GPUs) of a ddp/fsdp run, answers per prompt and answer length (GRPO and any method
that generates), the number and size of the evaluations, and the run's whole work (tokens trained plus answer tokens
written: answers per step x answer length x steps) at the Space's speed against its turn (`max_minutes`); and how many
runs one visitor, and everyone together, may have in the waiting line (`check_line`). Each refusal is an EngineError keyed ``space.limit.<name>`` that names the limit, the value asked for
and the variable that changes it, in the visitor's language.

`run_cost` is the arithmetic behind the checks (what a run of a config would do, counted from its fields), which
tests/test_space_limits.py also uses to derive the worst run the limits allow. This module sits beside engine/space.py:
it imports `errors` (the memory checks import the estimator when they run).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, make_dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import EngineError

TABLE_PATH = Path(__file__).resolve().parents[1] / "presets" / "space_limits.yaml"
GENERATING_METHODS = ("grpo",)  # methods that write answers while they train (num_generations, max_completion_length)


@functools.cache
def table() -> dict[str, Any]:
    """The table as read from presets/space_limits.yaml: {"space": ..., "limits": {name: row}, "fixed": ...}."""
    return yaml.safe_load(TABLE_PATH.read_text(encoding="utf-8"))


def _types() -> dict[str, type]:
    return {name: {"int": int, "float": float}[row["type"]] for name, row in table()["limits"].items()}


# The limits in force, one field per row of the table (its default as the field's default).
SpaceLimits = make_dataclass(
    "SpaceLimits", [(name, _types()[name], row["default"]) for name, row in table()["limits"].items()], frozen=True,
    namespace={"__doc__": "Per-run and per-line limits on a Space in demo mode: one field per row of presets/space_limits.yaml."})
# The owner's variable of each limit (Space settings -> Variables and secrets).
LIMIT_ENV: dict[str, str] = {name: row["env"] for name, row in table()["limits"].items()}


def limits(env: Any = None) -> Any:
    """The limits in force (a SpaceLimits): the table's defaults, each replaced by its variable in `LIMIT_ENV` when set
    to a positive number. A variable that is not a positive number is an error naming it."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name, kind in _types().items():
        raw = str(env.get(LIMIT_ENV[name], "")).strip()
        if not raw:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = 0.0
        if value <= 0:
            raise EngineError(key="space.error.bad_limit", env=LIMIT_ENV[name], value=raw)
        values[name] = int(value) if kind is int else value
    return SpaceLimits(**values)


def num(x: float) -> str:
    """A limit or value as people write it (3, not 3.0)."""
    return f"{x:g}"


def refuse(limit: str, value: Any, cap: Any, **params: Any) -> EngineError:
    """The refusal of a run above `limit`: its language key names the limit, the value asked for and the variable."""
    return EngineError(key=f"space.limit.{limit}", value=value, limit=cap, env=LIMIT_ENV[limit], **params)


@dataclass(frozen=True)
class RunCost:
    """What a run of a config would do, counted from its fields (the steps an epochs run takes are not known before its
    data is read: the step limit stands in for them)."""

    steps: int
    processes: int
    batch_tokens: int  # micro batch x sequence length: what one forward pass holds
    train_tokens: int  # steps x micro batch x accumulation x sequence length x processes (x2 for a pair: chosen, rejected)
    answers_per_step: int  # generating methods: micro batch x accumulation x processes answers per optimizer step
    generated_tokens: int  # steps x answers per step x answer length, + the fixed work (task scoring, eval samples, a mistakes run's own answers)
    evaluations: int  # evaluations of the eval set over the run


PAIR_METHODS = ("dpo", "orpo")  # a row is two sequences (the chosen and the rejected answer)


def run_cost(cfg: Any, lim: Any) -> RunCost:
    """The cost of a run of `cfg` (a TrainConfig) under the limits `lim` (see RunCost), the fixed work of every run
    included (the table's `fixed`: the date task scored before and after, a short answer to two eval prompts at each
    evaluation, and on builtin:date-mistakes the base model's answers its pairs are made of)."""
    fixed = table()["fixed"]
    steps = int(cfg.max_steps) if cfg.max_steps else int(lim.max_steps)
    processes = int(cfg.gpus) if getattr(cfg, "distributed", "none") != "none" else 1
    per_step = int(cfg.micro_batch_size) * int(cfg.grad_accum) * processes
    generating = cfg.method in GENERATING_METHODS
    answers = per_step if generating else 0
    every = max(1, int(cfg.eval_steps or cfg.save_steps or 1))  # Eval every, 0 = at every checkpoint (engine/training/trainer.py)
    has_eval = float(cfg.eval_fraction or 0) > 0 or bool(getattr(cfg, "eval_dataset", ""))
    evaluations = steps // every if has_eval else 0
    generated = steps * answers * int(cfg.max_completion_length) if generating else 0
    generated += 2 * fixed["task_items"] * fixed["task_new_tokens"] + evaluations * fixed["sample_prompts"] * fixed["sample_new_tokens"]
    if str(getattr(cfg, "dataset", "")) == fixed["mistakes_dataset"]:  # the pairs are the base model's own answers, written first
        generated += fixed["mistakes_answers"] * fixed["mistakes_new_tokens"]
    pair = 2 if cfg.method in PAIR_METHODS else 1
    return RunCost(steps=steps, processes=processes, batch_tokens=int(cfg.micro_batch_size) * int(cfg.max_seq_len),
                   train_tokens=steps * per_step * int(cfg.max_seq_len) * pair, answers_per_step=answers, generated_tokens=generated,
                   evaluations=evaluations)


def work_seconds(cost: RunCost, lim: Any) -> float:
    """Seconds a run of this cost needs on the Space, at its speeds (the table's train_tokens_per_s and
    generated_tokens_per_s); a teacher's or reference model's forward passes are within the rounding of those speeds."""
    return cost.train_tokens / float(lim.train_tokens_per_s) + cost.generated_tokens / float(lim.generated_tokens_per_s)


def check_run_cost(cfg: Any, lim: Any) -> None:
    """Refuse a run of `cfg` that asks more than `lim` allows, field by field, before it enters the line (the base
    model's size is checked by engine/space.py)."""
    if cfg.max_steps > lim.max_steps:
        raise refuse("max_steps", cfg.max_steps, lim.max_steps)
    if cfg.max_steps == 0 and cfg.epochs > lim.max_epochs:
        raise refuse("max_epochs", num(cfg.epochs), num(lim.max_epochs))
    if cfg.max_seq_len > lim.max_seq_len:
        raise refuse("max_seq_len", cfg.max_seq_len, lim.max_seq_len)
    cost = run_cost(cfg, lim)
    if cost.processes > lim.max_processes:
        raise refuse("max_processes", cost.processes, lim.max_processes)
    if cost.batch_tokens > lim.max_batch_tokens:
        raise refuse("max_batch_tokens", cost.batch_tokens, lim.max_batch_tokens, micro=cfg.micro_batch_size, seq=cfg.max_seq_len)
    if cfg.method in GENERATING_METHODS:
        if cfg.num_generations > lim.max_generations:
            raise refuse("max_generations", cfg.num_generations, lim.max_generations)
        if cfg.max_completion_length > lim.max_completion_length:
            raise refuse("max_completion_length", cfg.max_completion_length, lim.max_completion_length)
    if float(cfg.eval_fraction or 0) > lim.max_eval_fraction and not getattr(cfg, "eval_dataset", ""):
        raise refuse("max_eval_fraction", num(cfg.eval_fraction), num(lim.max_eval_fraction))
    if cost.evaluations > lim.max_evaluations:
        raise refuse("max_evaluations", cost.evaluations, lim.max_evaluations, steps=cost.steps)
    need_s = work_seconds(cost, lim)
    if need_s > float(lim.max_minutes) * 60:
        raise EngineError(key="space.limit.max_work", need=num(round(need_s / 60, 1)), steps=cost.steps, train=cost.train_tokens,
                          generated=cost.generated_tokens, limit=num(lim.max_minutes), env=LIMIT_ENV["max_minutes"])


def check_memory(cfg: Any, lim: Any) -> None:
    """Refuse a run whose training the memory estimator (engine/estimator/handoff.py `estimate_train`, the form's own
    prediction, DPO's reference model, GRPO's answers and a distillation's teacher included) puts above the Space's memory, in fp32 (a CPU Space
    trains in fp32 or in bf16 autocast over fp32 master weights). A base the estimator cannot size before the run (a run
    of this app, a Hub model offline) is left to the size limit and the run's own out-of-memory message."""
    from .estimator.handoff import estimate_train

    if str(cfg.base_model).startswith("run:") or cfg.method == "scratch" and not str(cfg.base_model).startswith("builtin:"):
        return
    try:
        gib = float(estimate_train(cfg, "fp32", on_cpu=True).allocated_gib) + teacher_gib(cfg)
    except EngineError:
        return
    if gib > lim.max_memory_gib:
        raise refuse("max_memory_gib", num(round(gib, 1)), num(lim.max_memory_gib), model=cfg.base_model)


def teacher_gib(cfg: Any) -> float:
    """What a distillation's frozen teacher holds beside the student's training (its fp32 weights and its logits for one
    micro batch, as engine/training/distill.py estimate_distill counts it); 0 for other methods and for a teacher the
    estimator cannot size before the run (a run of this app: the size limit and the run's own message stand)."""
    from .config import MemoryQuery
    from .estimator.memory import estimate

    teacher = str(getattr(cfg, "teacher_model", "") or "")
    if cfg.method != "distill" or not teacher or teacher.startswith("run:"):
        return 0.0
    query = MemoryQuery(model=teacher, task="inference", weight_precision="fp32", batch=cfg.micro_batch_size, seq_len=cfg.max_seq_len,
                        new_tokens=0)
    return float(estimate(query).allocated_gib)


def check_line(owner_runs: int, waiting: int, lim: Any) -> None:
    """Refuse one more run in the line: `owner_runs` of this visitor already training or waiting, `waiting` runs of
    everyone waiting (a run that would train at once is not counted: pass waiting=0)."""
    if owner_runs >= lim.max_runs_per_visitor:
        raise refuse("max_runs_per_visitor", owner_runs, lim.max_runs_per_visitor)
    if waiting >= lim.max_waiting:
        raise refuse("max_waiting", waiting, lim.max_waiting)


def check_visitor_line(runs_dir: Path, live: list[Path], queued: int, owner_hash: str | None, *, exclude: str = "",
                       lim: Any = None) -> None:
    """`check_line` for a run about to train or wait: `live` the run folders training or waiting now, `queued` how many
    of them wait (0 when the new run trains at once), `owner_hash` the sha256 of its visitor's key (engine/run_access.py;
    None: the app's owner, e.g. --auto-resume), `exclude` the run itself when it is resumed."""
    lim = lim or limits()
    mine = 0
    for folder in live:
        try:
            mine += folder.name != exclude and bool(owner_hash) and (folder / "owner").read_text(encoding="ascii").strip() == owner_hash
        except OSError:
            continue
    check_line(mine, queued, lim)
