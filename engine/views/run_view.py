"""How a training run looks on the Fine-tune panel: the status text, the progress bar, the loss plot's frame, the
run history table and run picker, and which run a page watches when it opens."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import EngineError
from ..runs import log_tail
from ..sharing import is_shared

if TYPE_CHECKING:
    from ..runs import RunSummary
    from ..training.jobs import JobManager

HISTORY_HEADERS = ["run", "state", "method", "base", "data", "steps", "best eval loss", "task acc", "seconds", "memory pred/meas GiB", "resumable"]
STATE_ICONS = {"running": "🟢", "finished": "✅", "stopped": "⏸", "failed": "❌", "killed": "⚠", "created": "…", "damaged": "🛠"}


def scrub_paths(text: str, runs_dir: Path) -> str:
    """`text` with the server's folders replaced by placeholders (<runs>, <app>, ~): what a visitor may see of a log."""
    import sys

    out = str(text or "")
    places = [(str(Path(runs_dir).resolve()), "<runs>"), (str(Path(runs_dir)), "<runs>"), (str(Path(__file__).resolve().parents[2]), "<app>"),
              (sys.prefix, "<python>"), (str(Path.home()), "~")]
    for real, label in sorted(places, key=lambda p: -len(p[0])):
        if real and real not in ("/", "."):
            out = out.replace(real, label)
    return out


def data_label(dataset: str) -> str:
    """How a run's dataset is shown to everyone: built-in and Hub references as they are; an uploaded file by its name
    only (never the server path), and on a shared app not even that (it may say whose data it is)."""
    if not dataset or dataset.startswith(("builtin:", "hub:")):
        return dataset
    return "(an uploaded file)" if is_shared() else Path(dataset).name.split("-", 1)[-1]


def run_choices(jobs: JobManager) -> list[str]:
    """Every run's name, for the run picker."""
    return [s.name for s in jobs.list_runs()]


def opening_run(jobs: JobManager) -> tuple[str | None, list[str]]:
    """The run a page watches when it opens (the active one, else the first listed) and the run picker's choices."""
    active, runs = jobs.active(), run_choices(jobs)
    return active or (runs[0] if runs else None), runs


def interrupted_run(jobs: JobManager) -> RunSummary | None:
    """The newest run whose process is gone without a final event (killed: a Colab runtime that disconnected, a closed
    laptop, a crash of the machine) and that can be resumed; None when there is none or a job is running now."""
    if jobs.active():
        return None
    return next((s for s in jobs.list_runs() if s.state == "killed" and s.resumable), None)


def resume_offer(jobs: JobManager) -> tuple[str | None, str]:
    """(run name, what the top of the Fine-tune panel says) for the newest interrupted run; (None, "") when none."""
    s = interrupted_run(jobs)
    if s is None:
        return None, ""
    from ..runs import last_complete_checkpoint

    ckpt = last_complete_checkpoint(s.path)
    where = f"its last checkpoint ({ckpt.name}, step {ckpt.name.split('-')[-1]} of {s.max_steps or '?'})" if ckpt else "the start (it had saved no checkpoint yet)"
    return s.name, (f"⚠ **Run '{s.name}' was interrupted** at step {s.step} (its process ended without finishing: a disconnect or a restart). "
                    f"**Resume** continues it from {where} with its own settings.")


def watched_outputs(jobs: JobManager, name: str | None) -> tuple[str, str, pd.DataFrame, str, list[list[Any]]] | None:
    """What the timer refreshes for the watched run: status, progress bar, loss frame, log tail (40 lines) and the history
    rows; None when no run is watched or it cannot be read (the page keeps what it shows)."""
    if not name:
        return None
    try:
        s = jobs.status(name)
    except EngineError:
        return None
    merge = merge_status_md(jobs, name)
    return (status_md(s) + (f"\n\n{merge}" if merge else ""), progress_html(s, s.last_progress), loss_frame(s.losses),
            scrub_paths(log_tail(s.path, 40), s.path.parent), history_rows(jobs))


def merge_status_md(jobs: JobManager, name: str | None) -> str:
    """One line on the run's latest merge (running, done with its folder, or failed with why); "" when there was none."""
    if not name:
        return ""
    try:
        events = jobs.merge_events(name)
    except EngineError:
        return ""
    if not events:  # none yet: the merge process may still be starting
        return "🔀 Merging the adapter… (starting)" if jobs.active_merge() == name else ""
    last = events[-1]
    if last.get("type") == "merge_done":
        return f"🔀 Merged model saved in the run's merged/ folder ({last.get('seconds')} s on the {last.get('device')}) — load `run:{name}/merged` in the Playground."
    if last.get("type") == "merge_error":
        return f"🔀 **Merge failed:** {last.get('message')}"
    if jobs.active_merge() == name:
        return f"🔀 Merging the adapter… ({last.get('reason', '')})"
    return "🔀 The merge process ended without finishing (killed?): merge again."


def history_rows(jobs: JobManager) -> list[list[Any]]:
    """One row per run, in the columns of HISTORY_HEADERS."""
    rows = []
    for s in jobs.list_runs():
        mem = f"{s.predicted_gib:.2f} / {s.measured_gib:.2f}" if s.predicted_gib and s.measured_gib else (f"- / {s.measured_gib:.2f}" if s.measured_gib else "")
        score = " → ".join(f"{v:.0%}" for v in s.task_scores.values()) if s.task_scores else ""
        rows.append([s.name, s.state, s.method, s.base_model, data_label(s.dataset), f"{s.step}/{s.max_steps}",
                     None if s.best_eval_loss is None else round(s.best_eval_loss, 4), score,
                     None if s.duration_s is None else round(s.duration_s), mem, "yes" if s.resumable else ""])
    return rows


def status_md(s: RunSummary) -> str:
    """The run's state, step, loss, memory (predicted / measured), task scores and what to do next, as Markdown."""
    lines = [f"### {STATE_ICONS.get(s.state, '')} {s.name}: {s.state}" + (f" — {s.phase}" if s.state == "running" and s.phase else "")]
    if s.max_steps:
        lines.append(f"step **{s.step} / {s.max_steps}**" + (f" · loss **{s.last_loss:.4f}**" if s.last_loss is not None else ""))
    if s.predicted_gib or s.measured_gib:
        measured = "process RSS peak on CPU" if s.device == "cpu" else "torch max allocated"
        lines.append(f"memory: predicted **{s.predicted_gib or 0:.2f} GiB** / measured **{s.measured_gib or 0:.2f} GiB** ({measured})")
    if s.task_scores:
        lines.append("date task accuracy: " + " → ".join(f"{k} **{v:.0%}**" for k, v in s.task_scores.items()))
    if s.state == "finished":
        lines.append(f"Saved **{s.output}/** in the run's folder — choose `run:{s.name}` in the Playground.")
    if s.state == "damaged":
        lines.append(f"This run's folder is damaged ({s.error or 'its config.yaml cannot be read'}): it cannot be resumed or loaded; delete it.")
    if s.state == "failed" and s.error:
        lines.append(f"**Error:** {scrub_paths(s.error, s.path.parent)}" + ("" if s.error_kind == "oom" else " — the last lines of the log below say more."))
        if s.error_kind == "oom":
            lines.append("Click **Retry after OOM** to rerun with half the micro batch and twice the accumulation (same effective batch).")
        if s.error_kind == "nan":
            lines.append("Resume continues from the last good checkpoint with the same settings (a one-off spike may pass); to change the "
                         "precision or the learning rate, start a new run with them.")
    if s.resumable:
        lines.append("This run can be resumed from its last checkpoint (Resume).")
    return "\n\n".join(lines)


def progress_html(s: RunSummary, last: dict | None) -> str:
    """A progress bar with tokens/s and ETA from the last progress event (the built-in base's pretraining first, if running)."""
    step, total, label = s.step, s.max_steps, ""
    if s.state == "running" and s.base_progress and not s.max_steps:  # still pretraining the built-in base
        step, total, label = s.base_progress.get("step", 0), s.base_progress.get("max_steps", 0), "pretraining the built-in base · "
        last = s.base_progress
    pct = 100.0 if s.state == "finished" else (100.0 * step / total if total else 0.0)
    extra = ""
    if last and s.state == "running":
        eta = last.get("eta_s")
        extra = f" · {last.get('tokens_per_s') or 0:.0f} tokens/s" + (f" · ETA {int(eta // 60)}m{int(eta % 60):02d}s" if eta is not None else "")
    return (f"<div style='width:100%;background:#eee;border-radius:6px'><div style='width:{pct:.1f}%;background:#4f8ef7;height:14px;"
            f"border-radius:6px'></div></div><small>{label}{pct:.0f}%{extra}</small>")


def loss_frame(losses: list[dict[str, Any]]) -> pd.DataFrame:
    """The loss curve (train, eval, and "pretraining": the built-in base's, while a run pretrains it first) as the line
    plot reads it."""
    df = pd.DataFrame(losses, columns=["step", "loss", "kind"])
    # numeric axes; the colour column as plain Python objects (pandas 3's inferred StringDtype is not plotted)
    return df.astype({"step": "int64", "loss": "float64", "kind": object})
