"""The run history on the Fine-tune panel, without gradio: a table short enough for its panel (name, method, status,
when, eval loss) in the visitor's language, and the details of the run a person selects in it.

Everything else a run has (base model, data, steps, task accuracy, duration, memory predicted and measured, whether it
can be resumed) is shown on demand for the selected row (`run_details_md`), not as more columns.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import EngineError
from ..i18n import fmt_number, t
from ..sharing import is_shared
from .bench_view import history_line
from .run_log import fmt_duration, fmt_loss, when_text

if TYPE_CHECKING:
    from ..runs import RunSummary
    from ..training.jobs import JobManager

HISTORY_COLUMNS = ("run", "method", "state", "when", "eval_loss")
STATE_ICONS = {"running": "●", "finished": "✔", "stopped": "‖", "failed": "✖", "killed": "⚠", "created": "…", "damaged": "⚒",
               "queued": "◔"}


def state_text(state: str, lang: str = "en") -> str:
    """A run's state word in the visitor's language (running / em andamento...)."""
    return t(f"finetune.state.{state}", lang) if state in STATE_ICONS else state


def history_headers(lang: str = "en") -> list[str]:
    """The history table's column names in `lang`: short words that never break mid-word."""
    return [t(f"finetune.history.col.{c}", lang) for c in HISTORY_COLUMNS]


def ago(started: float | None, lang: str = "en", now: float | None = None) -> str:
    """When a run started, relative to now: just now, 12 min ago, 3 h ago, 2 days ago (agora, há 12 min...)."""
    if not started:
        return "—"
    s = max(0.0, (now or time.time()) - float(started))
    if s < 60:
        return t("finetune.history.ago.now", lang)
    if s < 3600:
        return t("finetune.history.ago.min", lang, n=int(s // 60))
    if s < 86400:
        return t("finetune.history.ago.hours", lang, n=int(s // 3600))
    return t("finetune.history.ago.days", lang, n=int(s // 86400))


def history_rows(jobs: JobManager, lang: str = "en", now: float | None = None) -> list[list[Any]]:
    """One row per run (newest first, as jobs lists them), in the columns of HISTORY_COLUMNS."""
    return [[s.name, s.method or "—", f"{STATE_ICONS.get(s.state, '')} {state_text(s.state, lang)}", ago(s.started, lang, now),
             fmt_loss(s.best_eval_loss, lang)] for s in jobs.list_runs()]


def history_table(jobs: JobManager, lang: str = "en") -> pd.DataFrame:
    """The history table with its headers in `lang` (the headers travel with the value, so they follow the language)."""
    return pd.DataFrame(history_rows(jobs, lang), columns=history_headers(lang))


def data_label(dataset: str, lang: str = "en") -> str:
    """How a run's dataset is shown to everyone: built-in and Hub references as they are; an uploaded file by its name
    only (never the server path), and on a shared app not even that (it may say whose data it is)."""
    if not dataset or dataset.startswith(("builtin:", "hub:")):
        return dataset
    return t("finetune.history.uploaded", lang) if is_shared() else Path(dataset).name.split("-", 1)[-1]


def memory_text(s: RunSummary, lang: str = "en") -> str:
    """Predicted vs measured peak memory, saying what each one counts: the estimator predicts the model's training
    (weights, gradients, optimizer, activations); on a CPU the measurement is the whole process (Python, PyTorch, the
    data), on a GPU what PyTorch allocated there."""
    if not (s.predicted_gib or s.measured_gib):
        return ""
    pred = fmt_number(round(s.predicted_gib, 2), lang) if s.predicted_gib else "—"
    meas = fmt_number(round(s.measured_gib, 2), lang) if s.measured_gib else "—"
    key = "finetune.status.memory_cpu" if s.device == "cpu" else "finetune.status.memory_gpu"
    return t(key, lang, predicted=pred, measured=meas)


def run_details_md(s: RunSummary, lang: str = "en") -> str:
    """Everything the short history row leaves out, for the selected run, as Markdown."""
    rows = [(t("finetune.details.base", lang), f"`{s.base_model}`" if s.base_model else "—"),
            (t("finetune.details.data", lang), f"`{data_label(s.dataset, lang)}`" if s.dataset else "—"),
            (t("finetune.details.steps", lang), f"{fmt_number(s.step, lang)} / {fmt_number(s.max_steps, lang)}"),
            (t("finetune.details.eval_loss", lang), fmt_loss(s.best_eval_loss, lang))]
    if s.task_scores:
        rows.append((t("finetune.details.task", lang), " → ".join(f"{when_text(k, lang)} {fmt_number(round(100 * (v or 0)), lang)}%"
                                                                  for k, v in s.task_scores.items())))
    if bench := history_line(s.path, lang):  # the Playground's Benchmarks tab: scores with the harness's standard error, and the base's
        rows.append((t("bench.history", lang), bench))
    if s.duration_s is not None:
        rows.append((t("finetune.details.took", lang), fmt_duration(s.duration_s)))
    if s.resumable:
        rows.append((t("finetune.details.resumable", lang), t("finetune.details.yes", lang)))
    elif s.restartable:
        rows.append((t("finetune.details.resumable", lang), t("run_restart.details", lang)))
    head = f"**{s.name}** · {STATE_ICONS.get(s.state, '')} {state_text(s.state, lang)}"
    mem = memory_text(s, lang)  # a sentence of its own ("Memory: predicted ... measured ...")
    return head + "\n\n" + "\n".join(f"- {k}: {v}" for k, v in rows) + (f"\n- {mem}" if mem else "")


def selected_details(jobs: JobManager, name: str | None, lang: str = "en") -> str:
    """run_details_md of the picked run; "" when none is picked or it cannot be read."""
    if not name:
        return ""
    try:
        return run_details_md(jobs.status(name), lang)
    except EngineError:
        return ""
