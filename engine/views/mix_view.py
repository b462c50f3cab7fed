"""The Fine-tune panel's "Mix adapters", without gradio: which runs a visitor may mix, starting a mix, and a mixed run's
scores beside its parents' (the date task, any benchmark a run has, and any extra column a caller adds).

A mixed run's table has one row per model: the base, each parent (with its weight) and the mix. The date-task column
comes from the mix job, which scores all of them in one process on the same loaded base (engine/training/mix.py
`score_mix`); a parent's own "after" score from its training fills the cell when the mix did not score. Benchmark
columns come from each run's `benchmarks/*.json` (lm-evaluation-harness results or a flat `{"task": score}` mapping)
and from `extra`, a `{run name: {column: score}}` mapping for any other score a caller has.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EngineError, for_people
from ..i18n import fmt_number, t
from ..inference.harness import read_results
from ..mix_config import MIX_DENSITY_METHODS, MixConfig
from ..runs import read_events, run_path

if TYPE_CHECKING:
    from ..training.jobs import JobManager

BENCHMARKS_DIR = "benchmarks"
# lm-evaluation-harness metric names, most telling first: the first one a task reports is its column
METRIC_ORDER = ("acc_norm,none", "acc,none", "exact_match,strict-match", "exact_match,flexible-extract", "exact_match,none", "f1,none",
                "mcc,none", "bleu,none")


def mixable_runs(jobs: JobManager, owner: str | None) -> list[str]:
    """The finished runs with a LoRA adapter that the holder of `owner` may mix (shared mode: only their own)."""
    return [s.name for s in jobs.list_runs() if s.state == "finished" and s.output == "adapter" and jobs.may_control(s.name, owner)]


def mix_config(parents: list[str] | None, combination: str, weights: list[float | None], density: float, svd_rank: float,
               score: bool, run_name: str) -> MixConfig:
    """The form's values as a MixConfig (ConfigError naming the field); `weights`: one per picked run, in their order."""
    names = [p for p in (parents or []) if p]
    shown = [1.0 if w is None else float(w) for w in list(weights)[: len(names)]]
    given = "" if all(w == 1.0 for w in shown) else ",".join(f"{w:g}" for w in shown)
    return MixConfig(parents=",".join(names), combination=combination, weights=given, density=float(density),  # type: ignore[arg-type]
                     svd_rank=int(svd_rank or 0), score=bool(score), run_name=(run_name or "").strip())


def start(jobs: JobManager, cfg: MixConfig, owner: str | None, lang: str = "en") -> tuple[str, str, list[str]]:
    """Start the mix job: (the new run's name, the message to show, the warnings to show), in the visitor's language."""
    from ..training.mix_job import start_mix

    name, warnings = start_mix(jobs, cfg, owner)
    message = t("mix.ui.started", lang, parents=" + ".join(cfg.parent_list), method=cfg.combination, name=name)
    return name, message, [w.render(lang) for w in warnings]


def _metric(results: dict[str, Any]) -> float | None:
    for key in METRIC_ORDER:
        if isinstance(results.get(key), (int, float)):
            return float(results[key])
    numbers = [v for k, v in results.items() if isinstance(v, (int, float)) and "stderr" not in k and not isinstance(v, bool)]
    return float(numbers[0]) if numbers else None


def benchmark_scores(run_dir: Path) -> dict[str, float]:
    """The benchmark scores a run has: the Benchmarks tab's results (`<run>/benchmarks/results/<task>.json`, its metric's
    value), and any `<run>/benchmarks/*.json`: lm-evaluation-harness output (`results`: task -> metrics, the first metric
    of METRIC_ORDER it reports) or a flat `{"task": score}` mapping. Unreadable files are left out."""
    out: dict[str, float] = {}
    folder = Path(run_dir) / BENCHMARKS_DIR
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        results = data.get("results", data.get("scores", data))
        for task, value in results.items() if isinstance(results, dict) else []:
            score = _metric(value) if isinstance(value, dict) else value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
            if score is not None and math.isfinite(score):
                out[str(task)] = float(score)
    for task, result in read_results(folder).items():  # the Benchmarks tab's own results (engine/inference/harness.py), per task
        value = result.get("value")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[task] = float(value)
    return out


def _after_score(run_dir: Path) -> float | None:
    scores = [ev.get("accuracy") for ev in read_events(run_dir) if ev.get("type") == "task_score" and ev.get("when") == "after"]
    return scores[-1] if scores and scores[-1] is not None else None


def mix_note(jobs: JobManager, name: str | None, lang: str = "en") -> str:
    """One line on a mixed run (its parents, method, density, rank), or how to see one; "" for a name that is not a run."""
    from ..training.mix import read_mix

    if not name:
        return t("mix.ui.pick_mix", lang)
    try:
        run_dir = run_path(jobs.runs_dir, name)
    except EngineError:
        return ""
    cfg = read_mix(run_dir)
    if cfg is None:
        return t("mix.ui.pick_mix", lang)
    mixed = next((ev for ev in read_events(run_dir) if ev.get("type") == "mix"), {})
    density = t("mix.ui.density", lang, density=for_people(cfg.density, lang)) if cfg.combination in MIX_DENSITY_METHODS else ""
    rank = mixed.get("rank")
    return t("mix.ui.note", lang, name=name, parents=" + ".join(cfg.parent_list), method=cfg.combination, density=density,
             rank=fmt_number(rank, lang) if rank is not None else "…")


def side_by_side(jobs: JobManager, name: str | None, lang: str = "en",
                 extra: dict[str, dict[str, float]] | None = None) -> tuple[list[str], list[list[Any]]]:
    """A mixed run's table: (headers, rows), one row per model (base, each parent, the mix) with its role, its date-task
    accuracy and one column per benchmark any of them has (`benchmarks/*.json`, then `extra[run][column]`); ([], []) for
    a run that is not a mix. Scores are percentages for people; a missing one says so."""
    from ..training.mix import mix_scores, read_mix

    if not name:
        return [], []
    try:
        run_dir = run_path(jobs.runs_dir, name)
    except EngineError:
        return [], []
    cfg = read_mix(run_dir)
    if cfg is None:
        return [], []
    dated = mix_scores(run_dir)
    models: list[tuple[str, str, Path | None]] = [("base", t("mix.ui.role.base", lang), None)]
    for parent, weight in zip(cfg.parent_list, cfg.weight_list, strict=True):
        models.append((parent, t("mix.ui.role.parent", lang, weight=for_people(weight, lang)), run_path(jobs.runs_dir, parent)))
    models.append((name, t("mix.ui.role.mix", lang), run_dir))
    extra = extra or {}
    benches = {label: {**(benchmark_scores(folder) if folder is not None and folder.is_dir() else {}), **extra.get(label, {})}
               for label, _role, folder in models}
    columns = sorted({c for scores in benches.values() for c in scores})
    pending = t("mix.ui.pending", lang)

    def pct(value: float | None) -> str:
        return pending if value is None else fmt_number(round(100 * value, 1), lang, 1) + " %"

    rows = []
    for label, role, folder in models:
        date = dated.get(label)
        if date is None and folder is not None and folder != run_dir and folder.is_dir():
            date = _after_score(folder)  # the parent's own score after its training, when the mix did not score
        rows.append([label, role, pct(date), *[pct(benches[label].get(c)) for c in columns]])
    headers = [t("mix.ui.col.model", lang), t("mix.ui.col.role", lang), t("mix.ui.col.date", lang), *columns]
    return headers, rows
