"""A shorter run, suggested while the first run trains on a slow or busy machine: when the time left is over about ten
minutes, the measured settings of the first run (presets/first_run.yaml: steps, sequence length, micro batch and the
date-task accuracy they reached, each with its source) that are shorter than this run, each with the time it would take
here (from this run's own measured seconds per step, scaled by the tokens a step reads) and its expected accuracy.

Only for the runs those measurements describe: the built-in compact model fully fine-tuned on the built-in date task."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import EngineError
from ..estimator.catalog import PRESETS_DIR
from ..i18n import fmt_number, t
from .run_log import fmt_duration

if TYPE_CHECKING:
    from ..runs import RunSummary

SLOW_RUN_S = 600.0  # a first run longer than this (about ten minutes) gets the suggestion
MAX_SHOWN = 3  # settings listed, fastest first
# steps timed before any advice: the first steps carry the start-up (the first batch, the allocator, a loaded machine's
# bursts); at step 1 a first run once read "14 minutes left" and advised shorter settings, then took 1-4 minutes
MIN_TIMED_STEPS = 20


@dataclass(frozen=True)
class FirstRunPoint:
    """One measured first-run setting (presets/first_run.yaml)."""

    max_steps: int
    max_seq_len: int
    micro_batch_size: int
    accuracy: float  # date-task accuracy after training, 0..1
    spread: str  # across seeds, when measured ("87-92%"), else ""
    source: str


@functools.cache
def first_run_points() -> tuple[FirstRunPoint, ...]:
    """The measured settings of presets/first_run.yaml (data with their sources), in file order."""
    import yaml

    path = PRESETS_DIR / "first_run.yaml"
    try:
        rows = (yaml.safe_load(path.read_text(encoding="utf-8")) or {})["measurements"]
        return tuple(FirstRunPoint(int(r["max_steps"]), int(r["max_seq_len"]), int(r["micro_batch_size"]), float(r["accuracy"]),
                                   str(r.get("spread", "")), str(r["source"])) for r in rows)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise EngineError(f"Cannot read {path.name}: {exc}") from exc


def is_first_run_kind(base_model: str, dataset: str, method: str) -> bool:
    """Whether the measurements describe this run: the built-in compact model, fully fine-tuned on the date task."""
    return base_model == "builtin:compact-mini" and dataset == "builtin:dates" and method == "full"


def shorter_runs(seconds_per_step: float, max_steps: int, max_seq_len: int, micro_batch_size: int,
                 fixed_s: float = 0.0) -> list[tuple[FirstRunPoint, float]]:
    """(setting, expected seconds here) for the measured settings that would be shorter than this run, fastest first.
    A step's time scales with the tokens it reads (micro batch x sequence length); fixed_s: what every run adds (the
    date task measured before and after)."""
    tokens = micro_batch_size * max_seq_len
    this_run = seconds_per_step * max_steps
    out = []
    for p in first_run_points():
        took = seconds_per_step * p.max_steps * (p.micro_batch_size * p.max_seq_len) / tokens
        if took < this_run * 0.9:  # clearly shorter
            out.append((p, took + fixed_s))
    return sorted(out, key=lambda pair: pair[1])


def shorter_run_md(s: RunSummary, lang: str = "en") -> str:
    """The suggestion for the watched run, as Markdown in `lang`; "" unless it is a first run, training, with a speed
    measured over at least MIN_TIMED_STEPS steps, and more than SLOW_RUN_S left."""
    last = s.last_progress or {}
    if s.state != "running" or s.phase != "training" or not is_first_run_kind(s.base_model, s.dataset, s.method):
        return ""
    step, elapsed, eta = last.get("step") or 0, last.get("elapsed_s"), last.get("eta_s")
    if step < MIN_TIMED_STEPS or not elapsed or eta is None:
        return ""
    measuring = float(s.task_seconds.get("before", 0.0))
    left = float(eta) + (measuring if "after" not in s.task_scores else 0.0)
    if left <= SLOW_RUN_S:
        return ""
    from ..runs import load_config

    try:
        cfg = load_config(s.path / "config.yaml")
    except EngineError:
        return ""
    per_step = float(elapsed) / step
    options = shorter_runs(per_step, cfg.max_steps, cfg.max_seq_len, cfg.micro_batch_size, fixed_s=2 * measuring)[:MAX_SHOWN]
    head = t("shorter_run.head", lang, left=fmt_duration(left), per_step=fmt_number(round(per_step, 2), lang, 2))
    if not options:
        return "◷ " + head + " " + t("shorter_run.none", lang)
    lines = [t("shorter_run.option", lang, steps=fmt_number(p.max_steps, lang), seq=fmt_number(p.max_seq_len, lang),
               batch=fmt_number(p.micro_batch_size, lang), took=fmt_duration(took), pct=fmt_number(round(100 * p.accuracy), lang))
             + (f" ({p.spread})" if p.spread else "") for p, took in options]
    return "◷ " + head + "\n\n" + "\n".join(f"- {line}" for line in lines) + "\n\n" + t("shorter_run.how", lang)
