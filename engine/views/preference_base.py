"""The base a preference method needs, as the Fine-tune form offers it: DPO, ORPO, KTO and GRPO refine a model that
already does the task; started from the built-in model (0% on the date task) GRPO's rewards are all 0 and teach
nothing, and pairs of a model's mistakes have nothing to build on.

- `learned_run(jobs)`: the newest finished run that learned the date task, which picking one of these methods offers
  as the base (engine/views/finetune_form.py `method_values`).
- `base_note(cfg, jobs, lang)`: said under Start before the run begins: what the chosen base scores on the date task,
  and what that means for the method (a 0% model gives GRPO nothing to reward).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..i18n import fmt_number, t
from ..objectives import OBJECTIVE_METHODS, REWARD_METHODS

if TYPE_CHECKING:
    from ..config import TrainConfig
    from ..runs import RunSummary
    from ..training.jobs import JobManager

# A run "learned the task" when the date task scored it at least this after training, and more than before it
LEARNED = 0.2


def _learned(s: RunSummary) -> bool:
    after, before = s.task_scores.get("after"), s.task_scores.get("before") or 0.0
    return after is not None and after >= LEARNED and after > before and s.output in ("adapter", "model") and (s.path / s.output).is_dir()


def learned_run(jobs: JobManager, owner: str | None = None) -> RunSummary | None:
    """The newest finished run whose date-task accuracy after training is at least LEARNED (and above its start), among
    those `owner` may train from (on a shared app their own: engine/run_access.py; another visitor's run is never named)."""
    from ..run_access import may_access

    runs = [s for s in jobs.finished_runs() if _learned(s) and may_access(jobs.runs_dir, s.name, owner, "train_from", owner_only=jobs.owner_only)]
    return max(runs, key=lambda s: s.started or 0.0, default=None)


def base_score(ref: str, jobs: JobManager) -> float | None:
    """What `ref` scores on the date task, when known: a run's score after training, a shipped example's recorded
    score, 0 for a built-in base model (pretrained on plain text, never on dates); None otherwise (a Hub model)."""
    from ..models.references import shipped_examples

    if ref.startswith("run:"):
        name = ref.split(":", 1)[1].split("/", 1)[0]
        s = next((r for r in jobs.finished_runs() if r.name == name), None)
        return None if s is None else s.task_scores.get("after")
    if ref.startswith("builtin:"):
        record = shipped_examples().get(ref.split(":", 1)[1])
        return float(record.get("date_task_accuracy", 0.0)) if record else 0.0
    return None


def base_note(cfg: TrainConfig, jobs: JobManager, lang: str = "en", owner: str | None = None) -> str:
    """For DPO/ORPO/KTO/GRPO: what the chosen base scores on the date task and what that means for the method, with a
    finished run that learned the task to start from instead when the base has not; "" for the other methods or a
    base whose score is unknown."""
    if cfg.method not in OBJECTIVE_METHODS:
        return ""
    score = base_score(cfg.base_model, jobs)
    if score is None:
        return ""
    pct = fmt_number(round(100 * score), lang)
    if score >= LEARNED:
        return "ℹ " + t("pref_run.base.scores", lang, base=cfg.base_model, pct=pct)
    better = learned_run(jobs, owner)
    instead = (t("pref_run.base.use_run", lang, run=f"run:{better.name}", pct=fmt_number(round(100 * better.task_scores["after"]), lang))
               if better else t("pref_run.base.train_first", lang))
    key = "pref_run.base.zero_grpo" if cfg.method in REWARD_METHODS else "pref_run.base.zero_pairs"
    return "⚠ " + t(key, lang, base=cfg.base_model, pct=pct, method=cfg.method.upper()) + " " + instead
