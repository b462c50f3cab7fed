"""The pictures of a run on the Fine-tune panel, without gradio: the loss plot's data (log scale and a smoothed series
beside the raw points) and the date task's accuracy before/after as bars with a few right and wrong answers.

The loss plot's data starts from run_view's frame (step, loss, kind: train / eval / pretraining); this module adds a
smoothed copy of each dense series (an exponential moving average, debiased like TensorBoard's, so the first points are
not pulled towards 0), the log scale (the plot's y is log10 of the loss, the tooltip keeps the real loss) and the series'
names in the visitor's language.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from ..i18n import LANGS, fmt_number, t
from .run_log import fmt_signed, when_text

SMOOTHED = ("train", "pretraining")  # dense series (one point per logging step) that get a smoothed copy; eval is sparse
COLORS = {"train": "#9dbcf5", "train~": "#1f5fd6", "eval": "#f28e2b", "pretraining": "#c4c4c4", "pretraining~": "#6b6b6b"}
PLOT_COLUMNS = ["step", "y", "loss", "kind"]  # y: what is drawn (the loss, or its log10); loss: the real value, for the tooltip
N_RIGHT, N_WRONG = 2, 3  # answers shown under the accuracy bars
# What DPO/ORPO and GRPO optimise, from the progress events (engine/training/callbacks.py OBJECTIVE_METRICS), per method:
# the second plot of a run of these methods (its y values are on a scale of their own, not the loss's).
OBJECTIVE_PLOTS = {"dpo": ("reward_margin", "pref_accuracy"), "orpo": ("reward_margin", "pref_accuracy"), "kto": ("reward_margin", "kl"),
                   "grpo": ("reward_mean", "reward_std", "completion_len")}
OBJECTIVE_COLUMNS = ["step", "value", "metric"]


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average with TensorBoard's debiasing: s_i = w*s_(i-1) + (1-w)*x_i, divided by 1 - w^i."""
    out, acc = [], 0.0
    for i, x in enumerate(values, start=1):
        acc = weight * acc + (1 - weight) * float(x)
        out.append(acc / (1 - weight**i))
    return out


def series_label(kind: str, lang: str = "en") -> str:
    """The name of a loss series in the visitor's language ("train", "treino (suavizado)"); a kind without a key as is.
    A smoothed series is its kind followed by "~"."""
    base = kind.rstrip("~")
    known = base in ("train", "eval", "pretraining")
    label = t(f"finetune.plot.kind.{base}", lang) if known else base
    return t("finetune.plot.smoothed", lang, series=label) if kind.endswith("~") else label


def series_colors() -> dict[str, str]:
    """Every series name in every language -> its colour (raw points light, the smoothed line dark), for the plot's
    color_map: the names are translated, the colours stay."""
    return {series_label(kind, lang): color for lang in LANGS for kind, color in COLORS.items()}


def loss_plot_frame(frame: pd.DataFrame, *, log_scale: bool = False, smoothing: float = 0.0, lang: str = "en") -> pd.DataFrame:
    """The line plot's data from run_view's loss frame (step, loss, kind): the raw points of each series, a smoothed copy
    of the dense ones when `smoothing` (the EMA weight, 0 to 0.99) is above 0, y = log10(loss) when `log_scale`
    (non-positive losses are left out there), and the series named in `lang`."""
    weight = min(max(float(smoothing or 0.0), 0.0), 0.99)
    parts: list[pd.DataFrame] = []
    for kind, group in frame.groupby("kind", sort=False):
        group = group.sort_values("step")
        parts.append(pd.DataFrame({"step": group["step"], "loss": group["loss"], "kind": str(kind)}))
        if weight > 0 and kind in SMOOTHED and len(group) > 1:
            parts.append(pd.DataFrame({"step": group["step"], "loss": ema(group["loss"].tolist(), weight), "kind": f"{kind}~"}))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["step", "loss", "kind"])
    if log_scale:
        out = out[out["loss"] > 0]
        out = out.assign(y=[math.log10(v) for v in out["loss"]])
    else:
        out = out.assign(y=out["loss"])
    out = out.assign(kind=[series_label(k, lang) for k in out["kind"]], loss=out["loss"].round(4))
    return out[PLOT_COLUMNS].astype({"step": "int64", "y": "float64", "loss": "float64", "kind": object}).reset_index(drop=True)


def y_title(log_scale: bool, lang: str = "en") -> str:
    """The loss axis' title: the loss, or its log10 (the tooltip shows the real loss either way)."""
    return t("finetune.plot.y_log" if log_scale else "finetune.plot.y", lang)


# ---- Date task: accuracy before/after as bars, with a few answers --------------------------------------------------

BAR_COLORS = {"before": "#9ca3af", "teacher": "#a855f7", "after": "#16a34a"}


def _bar(label: str, accuracy: float, color: str, lang: str) -> str:
    pct = max(0.0, min(1.0, float(accuracy or 0.0))) * 100
    return (f"<div style='display:flex;align-items:center;gap:8px;margin:4px 0'>"
            f"<span style='width:7em;flex:none'>{html.escape(label)}</span>"
            f"<span style='flex:1;background:var(--neutral-200,#e5e7eb);border-radius:4px;height:16px;overflow:hidden'>"
            f"<span style='display:block;width:{pct:.1f}%;height:100%;background:{color}'></span></span>"
            f"<b style='width:3.5em;text-align:right;flex:none'>{fmt_number(round(pct), lang)}%</b></div>")


def is_right(expected: str, got: str) -> bool:
    """The task's own scoring (engine/inference/tasks.py): exact match on the normalized first line."""
    from ..inference.tasks import normalize_answer

    return normalize_answer(str(got)) == str(expected).strip()


def task_examples(event: dict[str, Any]) -> list[tuple[bool, str, str, str]]:
    """(right?, prompt, expected, got) of a task_score event: a few right answers, then a few wrong ones (the run records
    the first answers and, separately, the first misses)."""
    seen, items = set(), []
    for triple in list(event.get("examples") or []) + list(event.get("misses") or []):
        if len(triple) != 3 or tuple(triple) in seen:
            continue
        seen.add(tuple(triple))
        prompt, expected, got = (str(x) for x in triple)
        items.append((is_right(expected, got), prompt, expected, got))
    right = [i for i in items if i[0]][:N_RIGHT]
    wrong = [i for i in items if not i[0]][:N_WRONG]
    return right + wrong


def task_html(events: Iterable[dict[str, Any]], lang: str = "en") -> str:
    """The date task's accuracy before (and of the teacher, and after) training as bars, with a few right and wrong answers
    of the latest scoring; "" when the run scored no task."""
    scores = {ev.get("when", "?"): ev for ev in events if ev.get("type") == "task_score"}
    if not scores:
        return ""
    n = next(iter(scores.values())).get("n") or 0
    head = f"<b>{html.escape(t('finetune.task.title', lang, n=fmt_number(n, lang)))}</b>"
    bars = "".join(_bar(when_text(w, lang), scores[w].get("accuracy") or 0.0, BAR_COLORS[w], lang)
                   for w in ("before", "teacher", "after") if w in scores)
    latest = scores.get("after") or scores.get("before") or next(iter(scores.values()))
    cell = "padding:4px 6px;vertical-align:top"
    rows = "".join(
        f"<tr><td style='{cell}'>{'✔' if ok else '✖'} {html.escape(prompt)}</td>"
        f"<td style='{cell};white-space:nowrap'><code>{html.escape(expected)}</code></td>"
        f"<td style='{cell};white-space:nowrap'><code>{html.escape(got.strip()[:40]) or '∅'}</code></td></tr>"
        for ok, prompt, expected, got in task_examples(latest))
    table = ""
    if rows:
        cols = "".join(f"<th style='{cell};text-align:left'>{html.escape(t(f'finetune.task.col.{c}', lang))}</th>" for c in ("prompt", "expected", "got"))
        caption = html.escape(t("finetune.task.examples", lang, when=when_text(str(latest.get("when", "")), lang)))
        table = (f"<details open><summary>{caption}</summary><div class='scroll-x' style='overflow-x:auto'><table style='font-size:0.85em;width:100%'>"
                 f"<thead><tr>{cols}</tr></thead><tbody>{rows}</tbody></table></div></details>")
    return f"<div class='task-accuracy'>{head}{bars}{table}</div>"


# ---- DPO/ORPO/GRPO: what the method optimises ----------------------------------------------------------------------


def objective_metrics(method: str) -> tuple[str, ...]:
    """The progress-event fields plotted for a run of `method` (none for the supervised methods)."""
    return OBJECTIVE_PLOTS.get(method, ())


def objective_frame(events: Iterable[dict[str, Any]], method: str, lang: str = "en") -> pd.DataFrame:
    """The objective plot's data (step, value, metric) of a DPO/ORPO/GRPO run from its progress events: reward margin and
    preference accuracy, or mean reward, its spread and the answers' length; the metrics named in `lang`. Empty for the
    other methods or before the first logging step."""
    names = objective_metrics(method)
    rows = [(int(ev.get("step", 0)), float(ev[m]), t(f"preference.plot.{m}", lang))
            for ev in events if ev.get("type") == "progress" for m in names if ev.get(m) is not None]
    return pd.DataFrame(rows, columns=OBJECTIVE_COLUMNS).astype({"step": "int64", "value": "float64", "metric": object})


def completions_html(events: Iterable[dict[str, Any]], lang: str = "en") -> str:
    """The latest sampled answers of a GRPO run with their rewards (best, middle, worst), as a small table; "" when
    there are none."""
    latest = None
    for ev in events:
        if ev.get("type") == "completions":
            latest = ev
    if latest is None or not latest.get("samples"):
        return ""
    cell = "padding:4px 6px;vertical-align:top"
    rows = "".join(
        f"<tr><td style='{cell};text-align:right'><b>{fmt_signed(s.get('reward') or 0.0, lang)}</b></td>"
        f"<td style='{cell}'><code>{html.escape(str(s.get('completion', '')).strip()[:80]) or '∅'}</code></td>"
        f"<td style='{cell}'><code>{html.escape(str(s.get('answer') or ''))}</code></td></tr>" for s in latest["samples"])
    cols = "".join(f"<th style='{cell};text-align:left'>{html.escape(t(f'preference.samples.col.{c}', lang))}</th>" for c in ("reward", "answer", "expected"))
    caption = html.escape(t("preference.samples.title", lang, step=fmt_number(latest.get("step", 0), lang)))
    return (f"<details open><summary>{caption}</summary><div class='scroll-x' style='overflow-x:auto'><table style='font-size:0.85em;width:100%'>"
            f"<thead><tr>{cols}</tr></thead><tbody>{rows}</tbody></table></div></details>")


# Where a metric's chart draws a dashed reference line, and why: 0 for the margin (no preference yet), 50% for the
# preference accuracy (a coin toss; trl counts a tie as a loss, so a DPO run starts at 0), 0 for GRPO's spread (no
# group of answers to tell apart)
REFERENCE_LINES = {"reward_margin": 0.0, "pref_accuracy": 0.5, "reward_std": 0.0}
CHART_W, CHART_H, CHART_LEFT, CHART_BOTTOM = 300, 96, 40, 18  # the SVG's size and the room its axis labels take


def _chart(points: Sequence[tuple[int, float]], metric: str, lang: str) -> str:
    """A small line chart of (step, value) points as inline SVG, with its axes: the steps along the bottom (first and
    last), the values up the left side (lowest and highest, and the reference line when the metric has one): a picture
    that needs no plot component (the run view's refresh sends it inside the task part)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    ref = REFERENCE_LINES.get(metric)
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys + ([ref] if ref is not None else [])), max(ys + ([ref] if ref is not None else []))
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 0.5, y1 + 0.5
    w, h = CHART_W - CHART_LEFT - 4, CHART_H - CHART_BOTTOM - 6

    def px(x: float) -> float:
        return CHART_LEFT + ((x - x0) / (x1 - x0) * w if x1 > x0 else w / 2)

    def py(y: float) -> float:
        return 6 + h - (y - y0) / (y1 - y0) * h

    def label(v: float) -> str:
        return f"{fmt_number(round(100 * v), lang)}%" if metric == "pref_accuracy" else fmt_number(round(v, 2), lang, 2)

    axis = "stroke='#9ca3af' stroke-width='1'"
    text = "font-size='10' fill='currentColor'"
    parts = [f"<line x1='{CHART_LEFT}' y1='6' x2='{CHART_LEFT}' y2='{6 + h}' {axis}/>",
             f"<line x1='{CHART_LEFT}' y1='{6 + h}' x2='{CHART_W - 4}' y2='{6 + h}' {axis}/>",
             f"<text x='{CHART_LEFT - 3}' y='{py(y1) + 4:.1f}' text-anchor='end' {text}>{html.escape(label(y1))}</text>",
             f"<text x='{CHART_LEFT - 3}' y='{py(y0) + 3:.1f}' text-anchor='end' {text}>{html.escape(label(y0))}</text>",
             f"<text x='{CHART_LEFT}' y='{CHART_H - 3}' {text}>{html.escape(fmt_number(x0, lang))}</text>",
             f"<text x='{CHART_W - 4}' y='{CHART_H - 3}' text-anchor='end' {text}>{html.escape(fmt_number(x1, lang))}</text>",
             f"<text x='{CHART_LEFT + w / 2:.1f}' y='{CHART_H - 3}' text-anchor='middle' {text}>{html.escape(t('finetune.plot.x', lang))}</text>"]
    if ref is not None and y0 < ref < y1:
        parts += [f"<line x1='{CHART_LEFT}' y1='{py(ref):.1f}' x2='{CHART_W - 4}' y2='{py(ref):.1f}' stroke='#9ca3af' stroke-dasharray='4 3'/>",
                  f"<text x='{CHART_LEFT - 3}' y='{py(ref) + 3:.1f}' text-anchor='end' {text}>{html.escape(label(ref))}</text>"]
    path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
    parts.append(f"<polyline fill='none' stroke='#1f5fd6' stroke-width='2' points='{path}'/>")
    return (f"<svg viewBox='0 0 {CHART_W} {CHART_H}' width='100%' height='{CHART_H}' role='img' "
            f"aria-label='{html.escape(t(f'preference.plot.{metric}', lang))}'>{''.join(parts)}</svg>")


def objective_html(events: Sequence[dict[str, Any]], method: str, lang: str = "en") -> str:
    """What a DPO/ORPO/GRPO run optimises, as small line charts (one per metric, each on its own scale, with its latest
    value), then GRPO's latest sampled answers with their reward; "" for the other methods or before the first point."""
    frame = objective_frame(events, method, lang)
    if frame.empty:
        return ""
    charts = []
    for metric in objective_metrics(method):
        points = [(int(ev.get("step", 0)), float(ev[metric])) for ev in events if ev.get("type") == "progress" and ev.get(metric) is not None]
        if not points:
            continue
        latest = f"{fmt_number(round(100 * points[-1][1]), lang)}%" if metric == "pref_accuracy" else fmt_number(round(points[-1][1], 3), lang, 3)
        good = f"<div style='font-size:0.8em;opacity:0.8'>{html.escape(t(f'pref_run.good.{metric}', lang))}</div>"
        charts.append(f"<div style='flex:1 1 240px;min-width:220px'><div style='font-size:0.85em'>{html.escape(t(f'preference.plot.{metric}', lang))}: "
                      f"<b>{latest}</b></div>{_chart(points, metric, lang)}{good}</div>")
    head = f"<b>{html.escape(t('preference.plot.title', lang))}</b>"
    return (f"<div class='objective-plot'>{head}<div style='display:flex;flex-wrap:wrap;gap:12px'>{''.join(charts)}</div>"
            f"{completions_html(events, lang)}</div>")
