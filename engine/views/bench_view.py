"""The Benchmarks tab without gradio: the curated tasks as choices and as a table (size, time on a CPU and a T4), the scores of a
model beside its base (or of any models side by side: a mixed run beside its parents) as a table with the harness's standard
error and as a chart, the job's progress as one line, and a run's scores for its line in the run history.

Results are read from the folders engine/benchmarks.py describes; nothing here imports the harness.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..benchmarks import BASE_FOLDER, RUN_FOLDER, bench_tasks, model_slug
from ..errors import render_record
from ..i18n import fmt_number, t
from ..inference.harness import read_results
from ..refs import RUN_PREFIX
from .run_log import fmt_duration

MODES = ("none", "8bit", "4bit")  # the precisions a base model's folder may be kept in, the plainest first


def task_choices(lang: str = "en") -> list[tuple[str, str]]:
    """The tasks for the checkbox group: 'dates_mc · pt+en · offline' -> 'dates_mc'."""
    return [(f"{task.name} · {task.language} · {t('bench.mark.' + ('offline' if task.local else 'hub'), lang)}", task.name)
            for task in bench_tasks().values()]


def _seconds(value: float | None, lang: str) -> str:
    return fmt_duration(value) if value is not None else t("bench.not_measured", lang)


def tasks_table(lang: str = "en") -> pd.DataFrame:
    """The curated list as the page shows it (docs/evaluation.md has the same table)."""
    cols = ["task", "language", "kind", "size", "limit", "cpu", "t4", "data"]
    rows = []
    for task in bench_tasks().values():
        size = fmt_number(task.size, lang)
        rows.append([task.name, task.language, t(f"bench.kind.{task.kind}", lang), t("bench.approx", lang, n=size) if task.approx else size,
                     fmt_number(task.limit, lang), _seconds(task.cpu_s, lang), _seconds(task.t4_s, lang),
                     t("bench.mark.offline", lang) if task.local else task.dataset])
    return pd.DataFrame(rows, columns=[t(f"bench.col.{c}", lang) for c in cols])


# --------------------------------------------------------------------------------------------------
# Whose scores: a model, a run and its base
# --------------------------------------------------------------------------------------------------

def model_folder(runs_dir: Path, ref: str, mode: str | None = None) -> Path:
    """Where the scores of `ref` are: a run's benchmarks/; for any other model its folder in `mode`, or (None) the first of the
    precisions that has results."""
    if ref.startswith(RUN_PREFIX) and "/" not in ref[len(RUN_PREFIX):]:
        return Path(runs_dir) / ref[len(RUN_PREFIX):] / RUN_FOLDER
    modes = [mode] if mode else list(MODES)
    folders = [Path(runs_dir) / BASE_FOLDER / model_slug(ref, m) for m in modes]
    return next((f for f in folders if read_results(f)), folders[0])


def sides(runs_dir: Path, ref: str) -> list[tuple[str, Path]]:
    """(model reference, folder) of what the before/after table compares for `ref`: a run's base (in the precision the run was
    scored in) then the run; any other model alone."""
    from ..models.references import read_run_base

    folder = model_folder(runs_dir, ref)
    if not ref.startswith(RUN_PREFIX) or folder.name != RUN_FOLDER:
        return [(ref, folder)]
    base, own = read_run_base(folder.parent)
    if not base:
        return [(ref, folder)]
    done = read_results(folder)
    mode = next((r.get("mode") for r in done.values() if r.get("mode")), None) or (own.mode if own is not None else "none")
    return [(base, model_folder(runs_dir, base, mode)), (ref, folder)]


def _cell(result: dict | None, lang: str) -> str:
    if not result or result.get("value") is None:
        return "—"
    value = fmt_number(round(100 * result["value"], 1), lang, 1)
    err = result.get("stderr")
    return f"{value} ± {fmt_number(round(100 * err, 1), lang, 1)}" if err is not None else value


def comparison(models: list[tuple[str, Path]], lang: str = "en") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(table, chart data) of the models' scores side by side, per task: the table has a column per model ('62.0 ± 4.9', in %,
    the harness's standard error) and, for two models, the change from the first to the second; the chart data is long
    (task, model, score) for a grouped bar chart. Tasks in the curated order, those that any of the models has."""
    results = [read_results(folder) for _, folder in models]
    names = [n for n in bench_tasks() if any(n in r for r in results)]
    labels = [ref for ref, _ in models]
    if len(models) == 2:
        labels = [f"{t('bench.col.before', lang)}: {models[0][0]}", f"{t('bench.col.after', lang)}: {models[1][0]}"]
    head = [t("bench.col.task", lang), t("bench.col.metric", lang), *labels] + ([t("bench.col.change", lang)] if len(models) == 2 else [])
    rows, bars = [], []
    for name in names:
        cells = [r.get(name) for r in results]
        metric = next((c.get("metric") for c in cells if c), "")
        row = [name, metric, *[_cell(c, lang) for c in cells]]
        if len(models) == 2:
            a, b = (c.get("value") if c else None for c in cells)
            row.append("—" if a is None or b is None else f"{'+' if b >= a else '−'}{fmt_number(round(abs(100 * (b - a)), 1), lang, 1)}")
        rows.append(row)
        bars += [{"task": name, "model": ref, "score": round(100 * c["value"], 1)} for (ref, _), c in zip(models, cells, strict=True)
                 if c and c.get("value") is not None]
    return pd.DataFrame(rows, columns=head), pd.DataFrame(bars, columns=["task", "model", "score"])


# --------------------------------------------------------------------------------------------------
# The job's progress, and a run's line in the history
# --------------------------------------------------------------------------------------------------

def status_md(events: list[dict[str, Any]], alive: bool, lang: str = "en") -> str:
    """One line on the latest job of a folder: starting, loading, task i of n, requests done, finished, stopped, failed."""
    if not events:
        return ""
    last, start = events[-1], next((e for e in events if e.get("type") == "bench_start"), {})
    kind = last.get("type")
    if kind == "bench_done":
        return t("bench.status.done", lang, seconds=fmt_duration(last.get("seconds") or 0))
    if kind == "bench_stopped":
        return t("bench.status.stopped", lang)
    if kind == "bench_error":
        return t("bench.status.failed", lang, error=render_record(last.get("i18n"), lang) if last.get("i18n") else last.get("message", ""))
    if not alive:
        return t("bench.status.killed", lang)
    side = t(f"bench.side.{last.get('side', 'model')}", lang) + f" `{last.get('ref', '')}`"
    task = next((e for e in reversed(events) if e.get("type") == "bench_task"), None)
    if kind == "bench_progress":
        return t("bench.status.progress", lang, side=side, task=last.get("task", ""), done=fmt_number(last.get("done", 0), lang),
                 total=fmt_number(last.get("total", 0), lang))
    if kind in ("bench_task", "bench_result", "bench_skip") and task is not None:
        return t("bench.status.task", lang, side=side, task=task.get("task", ""), i=task.get("index", 0) + 1, n=task.get("count", 1))
    if kind == "bench_load":
        return t("bench.status.load", lang, ref=last.get("ref", ""), mode=last.get("mode", ""))
    need = start.get("need_gib")
    return t("bench.status.start", lang, model=start.get("model", ""), mode=start.get("mode", ""), device=start.get("device", ""),
             need=fmt_number(need, lang) if need is not None else "?", room=fmt_number(start.get("room_gib") or 0, lang))


def history_line(run_dir: Path, lang: str = "en") -> str:
    """A run's benchmark scores for its details in the run history ('dates_mc 62.0 ± 4.9 (base 40.0 ± 4.9)'), "" when none."""
    run_dir = Path(run_dir)
    pairs = sides(run_dir.parent, f"{RUN_PREFIX}{run_dir.name}")
    own = read_results(pairs[-1][1])
    base = read_results(pairs[0][1]) if len(pairs) == 2 else {}
    parts = []
    for name in (n for n in bench_tasks() if n in own):
        before = f" ({t('bench.side.base', lang)} {_cell(base[name], lang)})" if name in base else ""
        parts.append(f"{name} {_cell(own[name], lang)}{before}")
    return ", ".join(parts)
