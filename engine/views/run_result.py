"""The headline result of a run in plain words, the one that applies to it: the date task's accuracy before and after
when the run trains on the date task (builtin:dates, or the pairs of the model's own mistakes on it), with whether
that is a gain, no clear change or a loss on 100 test dates; for a DPO/ORPO run on other pairs, how often the
chosen answer wins on the held-out pairs; for a KTO run on other labelled answers, how far the good answers' reward is
above the bad ones' on the held-out answers (KTO has no pairs to count wins on); for a GRPO run on other prompts, its
mean reward at the start and now.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..i18n import fmt_number, t
from ..objectives import MISTAKES_DATASET, OBJECTIVE_METHODS, REWARD_METHODS
from .run_log import fmt_plain

if TYPE_CHECKING:
    from ..runs import RunSummary

# The data of the date task: a run on these is judged by the date accuracy. builtin:preferences is scored on the date
# task too (300 of its 494 pairs are dates) but is judged by its held-out pairs: that is what it trains.
DATE_TASK_DATA = ("builtin:dates", MISTAKES_DATASET)
# On 100 test dates one run of one seed moves by up to about 4 points by chance (docs/preference.md): a difference of
# NOISE_POINTS or less is "no clear change".
NOISE_POINTS = 4


def task_verdict(before: float, after: float, lang: str = "en") -> str:
    """Whether the date task improved, in plain words: by how many points, or no clear change (within the noise)."""
    b, a = round(100 * before), round(100 * after)
    params = {"before": fmt_number(b, lang), "after": fmt_number(a, lang), "points": fmt_number(abs(a - b), lang), "noise": NOISE_POINTS}
    if a - b > NOISE_POINTS:
        return "✔ " + t("pref_run.verdict.better", lang, **params)
    if b - a > NOISE_POINTS:
        return "⚠ " + t("pref_run.verdict.worse", lang, **params)
    return "− " + t("pref_run.verdict.same", lang, **params)


def judged_by_date_task(s: RunSummary) -> bool:
    """Whether the date task is the run's headline: it trains on the date task (or is a supervised run the task scored)."""
    return s.dataset in DATE_TASK_DATA or (s.method not in OBJECTIVE_METHODS and bool(s.task_scores))


def _pairs_line(events: Sequence[dict[str, Any]], lang: str) -> str:
    evals = [ev for ev in events if ev.get("type") == "eval" and ev.get("pref_accuracy") is not None]
    if not evals:
        return ""
    n = next((ev.get("eval_examples") for ev in events if ev.get("type") == "data"), None) or 0
    pct = round(100 * float(evals[-1]["pref_accuracy"]))
    key = "pref_run.pairs.learned" if pct > 50 else "pref_run.pairs.not_yet"
    return ("✔ " if pct > 50 else "− ") + t(key, lang, pct=fmt_number(pct, lang), n=fmt_number(n, lang), step=fmt_number(evals[-1].get("step", 0), lang))


def _labels_line(events: Sequence[dict[str, Any]], lang: str) -> str:
    """KTO's: the held-out labelled answers' reward margin (good minus bad, trl's eval_rewards/margins) at the last evaluation."""
    evals = [ev for ev in events if ev.get("type") == "eval" and ev.get("reward_margin") is not None]
    if not evals:
        return ""
    n = next((ev.get("eval_examples") for ev in events if ev.get("type") == "data"), None) or 0
    margin = float(evals[-1]["reward_margin"])
    key = "pref_run.labels.learned" if margin > 0 else "pref_run.labels.not_yet"
    return ("✔ " if margin > 0 else "− ") + t(key, lang, margin=fmt_plain(margin, lang, 2), n=fmt_number(n, lang),
                                               step=fmt_number(evals[-1].get("step", 0), lang))


def _reward_line(events: Sequence[dict[str, Any]], lang: str) -> str:
    rewards = [float(ev["reward_mean"]) for ev in events if ev.get("type") == "progress" and ev.get("reward_mean") is not None]
    if len(rewards) < 2:
        return ""
    return t("pref_run.reward_trend", lang, first=fmt_plain(rewards[0], lang, 3), last=fmt_plain(rewards[-1], lang, 3))


def headline_md(s: RunSummary, events: Sequence[dict[str, Any]], lang: str = "en") -> str:
    """The run's result that applies to it, as Markdown in `lang` ("" when there is none yet)."""
    scores = s.task_scores
    if judged_by_date_task(s):
        if "before" in scores and "after" in scores:
            return task_verdict(scores["before"] or 0.0, scores["after"] or 0.0, lang)
        return ""
    if s.method in REWARD_METHODS:
        return _reward_line(events, lang)
    if s.method == "kto":
        return _labels_line(events, lang)
    if s.method in OBJECTIVE_METHODS:
        return _pairs_line(events, lang)
    return ""
