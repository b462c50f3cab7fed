"""How a training run looks on the Fine-tune panel, in the visitor's language: the status text, the progress bar, the loss
plot's frame, the run picker, which run a page watches when it opens, and everything the timer refreshes for it
(`watched_outputs`: with the loss plot's data, the accuracy bars, the log for people and the history table from
run_charts.py, run_log.py and run_history.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..errors import EngineError, for_people, from_json, render_record
from ..i18n import fmt_number, t
from ..objectives import OBJECTIVE_METHODS
from ..runs import log_tail, read_events
from .run_charts import loss_plot_frame, objective_html, task_html
from .run_history import STATE_ICONS, history_table, memory_text, run_details_md, state_text
from .run_log import fmt_duration, fmt_loss, log_text, phase_text, when_text
from .run_result import headline_md, judged_by_date_task
from .run_suggest import shorter_run_md

if TYPE_CHECKING:
    from ..runs import RunSummary
    from ..training.jobs import JobManager



def scrub_paths(text: str, runs_dir: Path) -> str:
    """`text` with the server's folders replaced by placeholders (<runs>, <app>, ~): what a visitor may see of a log. On a
    shared app an uploaded file is only "(an uploaded file)": its name may say whose data it is (run_history `data_label`)."""
    import re
    import sys

    from ..sharing import is_shared

    out = str(text or "")
    if is_shared():  # <...>/_uploads/<session>/<hash>-<name>, as engine/views/uploads.py names them
        out = re.sub(r"[^\s'\"]*_uploads/[0-9a-f]{16}/[^\s'\"]+", t("finetune.history.uploaded"), out)
    places = [(str(Path(runs_dir).resolve()), "<runs>"), (str(Path(runs_dir)), "<runs>"), (str(Path(__file__).resolve().parents[2]), "<app>"),
              (sys.prefix, "<python>"), (str(Path.home()), "~")]
    for real, label in sorted(places, key=lambda p: -len(p[0])):
        if real and real not in ("/", "."):
            out = out.replace(real, label)
    return out


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
    return next((s for s in jobs.list_runs() if s.state == "killed" and (s.resumable or s.restartable)), None)


def resume_offer(jobs: JobManager, lang: str = "en") -> tuple[str | None, str]:
    """(run name, what the top of the Fine-tune panel says) for the newest interrupted run; (None, "") when none."""
    s = interrupted_run(jobs)
    if s is None:
        return None, ""
    from ..runs import last_complete_checkpoint

    ckpt = last_complete_checkpoint(s.path)
    total = fmt_number(s.max_steps, lang) if s.max_steps else "?"
    where = (t("finetune.resume.from_ckpt", lang, checkpoint=ckpt.name, step=fmt_number(int(ckpt.name.split("-")[-1]), lang), total=total)
             if ckpt else t("finetune.resume.from_start", lang))
    return s.name, t("finetune.resume.offer", lang, name=s.name, step=fmt_number(s.step, lang), where=where)


@dataclass
class WatchedRun:
    """What the timer refreshes for the watched run, each part ready for its component."""

    status: str  # markdown
    progress: str  # HTML
    plot: pd.DataFrame  # the loss plot's data (run_charts.PLOT_COLUMNS)
    task: str  # HTML: the date task's accuracy bars with examples ("" when the run scored none)
    log: str  # one line per event, for people
    raw_log: str  # the last lines of train.log (server folders hidden)
    history: pd.DataFrame  # the history table, headers in the visitor's language
    details: str  # markdown: the run's facts that the history's short row leaves out
    running: bool  # training or merging: the page keeps refreshing, and redraws its plot less often (refresh.changed_parts)


def can_try(s: RunSummary) -> bool:
    """A run that finished and saved an adapter or a model (what the Playground loads as run:NAME)."""
    return s.state == "finished" and s.output in ("adapter", "model") and (s.path / s.output).is_dir()


def run_buttons(jobs: JobManager, name: str | None) -> tuple[bool, bool, bool, bool]:
    """Which of the picked run's buttons apply: (try it, resume, retry with a smaller batch, delete). A finished run
    offers no resume and a run that did not run out of memory no retry, so a person never presses a button only to
    read that it does not apply; nothing picked (or unreadable) shows none."""
    if not name:
        return False, False, False, False
    try:
        s = jobs.status(name)
    except EngineError:
        return False, False, False, False
    return can_try(s), s.resumable or s.restartable, s.state == "failed" and s.error_kind == "oom", s.state != "running"


def merge_applies(jobs: JobManager, name: str | None) -> bool:
    """Merge the adapter applies to the picked run: a finished run that saved a LoRA/QLoRA adapter (a full or
    from-scratch run is already a whole model, and an unfinished one has no final adapter), so it is offered only then."""
    if not name:
        return False
    try:
        s = jobs.status(name)
    except EngineError:
        return False
    return s.state == "finished" and s.output == "adapter" and (s.path / "adapter").is_dir()


def watched_outputs(jobs: JobManager, name: str | None, lang: str = "en", *, log_scale: bool = False,
                    smoothing: float = 0.0) -> WatchedRun | None:
    """What the timer refreshes for the watched run, in `lang`; None when no run is watched or it cannot be read (the
    page keeps what it shows). log_scale and smoothing: the loss plot's options (run_charts.loss_plot_frame)."""
    if not name:
        return None
    try:
        s = jobs.status(name)
    except EngineError:
        return None
    merge = merge_status_md(jobs, name, lang)
    events = read_events(s.path)
    runs_dir = s.path.parent
    hint = shorter_run_md(s, lang)  # a slow machine: shorter first-run settings, with their time here and accuracy
    return WatchedRun(status=status_md(s, lang, events) + (f"\n\n{hint}" if hint else "") + (f"\n\n{merge}" if merge else ""), progress=progress_html(s, s.last_progress, lang),
                      plot=loss_plot_frame(loss_frame(s.losses), log_scale=log_scale, smoothing=smoothing, lang=lang),
                      task=task_html(events, lang) + objective_html(events, s.method, lang), log=log_text(events, lang, scrub=lambda text: scrub_paths(text, runs_dir)),
                      raw_log=scrub_paths(log_tail(s.path, 40), runs_dir), history=history_table(jobs, lang), details=run_details_md(s, lang),
                      running=s.state == "running" or jobs.active_merge() == name)


def merge_status_md(jobs: JobManager, name: str | None, lang: str = "en") -> str:
    """One line on the run's latest merge (running, done with its folder, or failed with why); "" when there was none."""
    if not name:
        return ""
    try:
        events = jobs.merge_events(name)
    except EngineError:
        return ""
    if not events:  # none yet: the merge process may still be starting
        return "⋈ " + t("finetune.merge.starting", lang) if jobs.active_merge() == name else ""
    last = events[-1]
    if last.get("type") == "merge_done":
        return "⋈ " + t("finetune.merge.done", lang, took=fmt_duration(last.get("seconds")), device=last.get("device", "?"), name=name)
    if last.get("type") == "merge_error":
        return "⋈ " + t("finetune.merge.failed", lang, message=render_record(last.get("i18n"), last.get("message", ""), lang))
    if jobs.active_merge() == name:
        return "⋈ " + t("finetune.merge.running", lang, reason=for_people(from_json(last.get("reason_i18n")) or last.get("reason", ""), lang))
    return "⋈ " + t("finetune.merge.gone", lang)


def status_md(s: RunSummary, lang: str = "en", events: Sequence[dict[str, Any]] | None = None) -> str:
    """The run's state and phase, step and loss, memory (predicted for the model / measured for the process or the GPU),
    the result that applies to it and what to do next, as Markdown in `lang`. events: the run's, when the caller has
    read them (else read here when needed)."""
    phase = f" — {phase_text(scrub_paths(s.phase, s.path.parent), lang)}" if s.state == "running" and s.phase else ""
    lines = [f"### {STATE_ICONS.get(s.state, '')} {s.name}: {state_text(s.state, lang)}{phase}"]
    if s.state == "queued":  # its place in the waiting line (engine/training/queue.py)
        from .space_view import queue_md

        lines.append(queue_md(s, lang, running_device=s.queue_device or ""))
    if s.max_steps:
        step = t("finetune.status.step", lang, step=fmt_number(s.step, lang), total=fmt_number(s.max_steps, lang))
        lines.append(step + (" · " + t("finetune.status.loss", lang, loss=fmt_loss(s.last_loss, lang)) if s.last_loss is not None else ""))
    if mem := memory_text(s, lang):
        lines.append(mem)
    # the result that applies to the run (engine/views/run_result.py): the date task when it trains on it, else the
    # held-out pairs (DPO/ORPO/KTO) or the reward (GRPO); a run on other pairs that the date task scored too says so after
    by_task = judged_by_date_task(s)
    if not by_task and s.method in OBJECTIVE_METHODS and (head := headline_md(s, read_events(s.path) if events is None else events, lang)):
        lines.append(head)
    if s.task_scores:
        scores = " → ".join(f"{when_text(k, lang)} **{fmt_number(round(100 * (v or 0)), lang)}%**" for k, v in s.task_scores.items())
        lines.append(t("finetune.status.task" if by_task else "pref_run.also_scored", lang) + " " + scores)
        if by_task and (head := headline_md(s, (), lang)):
            lines.append(head)
    if s.state == "finished":
        lines.append(t("finetune.status.finished", lang, output=s.output or "?", name=s.name))
    if s.state == "damaged":
        lines.append(t("finetune.status.damaged", lang, error=s.error or t("finetune.status.no_config", lang)))
    if s.state == "failed" and s.error:
        error = scrub_paths(render_record(s.error_record, s.error, lang), s.path.parent)
        lines.append(t("finetune.status.error", lang, error=error) + ("" if s.error_kind == "oom" else " " + t("finetune.status.see_log", lang)))
        if s.error_kind == "oom":
            lines.append(t("finetune.status.oom", lang))
        if s.error_kind == "nan":
            lines.append(t("finetune.status.nan", lang))
    if s.resumable:
        lines.append(t("finetune.status.resumable", lang))
    elif s.restartable:  # no checkpoint (it failed while loading, or stopped before its first save): nothing to resume from
        lines.append(t("run_restart.status", lang))
    return "\n\n".join(lines)


def progress_html(s: RunSummary, last: dict | None, lang: str = "en", now: float | None = None) -> str:
    """A progress bar for the phase the run is in, with what is known of it: training (step, tokens/s, time left, the
    date task's measurement after training included), the date task's measurements (answers so far and their own time
    left), and the phases that report no fraction (loading, tokenizing, saving: how long so far). The built-in base's
    pretraining first, if it is running. now: the clock (tests)."""
    step, total, label = s.step, s.max_steps, ""
    running = s.state == "running"
    if running and s.base_progress and not s.max_steps:  # still pretraining the built-in base
        step, total, label = s.base_progress.get("step", 0), s.base_progress.get("max_steps", 0), t("finetune.progress.pretraining", lang) + " · "
        last = s.base_progress
    elif running and s.phase and s.phase != "training":
        return _bar(*phase_parts(s, lang, time.time() if now is None else now))
    pct = 100.0 if s.state == "finished" else (100.0 * step / total if total else 0.0)
    parts = [f"{fmt_number(round(pct), lang)}%"]
    if total:
        parts.append(t("finetune.progress.step", lang, step=fmt_number(step, lang), total=fmt_number(total, lang)))
    if last and running:
        parts.append(t("finetune.log.speed", lang, speed=fmt_number(round(last.get("tokens_per_s") or 0), lang)))
        if last.get("eta_s") is not None:
            after = measuring_after_s(s) if not label else None
            parts.append(t("run_progress.eta_with_measuring", lang, left=fmt_duration(last["eta_s"] + after)) if after else
                         t("finetune.progress.eta", lang, left=fmt_duration(last["eta_s"])))
    elif running and s.phase == "training" and s.phase_since:  # the first steps: no speed measured yet
        parts.append(t("run_progress.so_far", lang, took=fmt_duration((time.time() if now is None else now) - s.phase_since)))
    return _bar(pct, label + " · ".join(parts))


def measuring_after_s(s: RunSummary) -> float | None:
    """How long the date task's measurement after training may take: at most about as long as the one before (the same
    100 prompts; a trained model stops its answers sooner: 3 s after vs 9 s before in a first run measured on a 2-core
    CPU), so the time left is an upper bound that never reads 0 s while work remains; None when the run measures none
    after training (or has not measured before)."""
    if "after" in s.task_scores or "before" not in s.task_seconds:
        return None
    return float(s.task_seconds["before"])


def phase_parts(s: RunSummary, lang: str, now: float) -> tuple[float, str]:
    """(percent, text) of a phase other than training: its name, then its own progress and time left when it reports
    them (the date task: answers so far), else how long it has taken so far; the bar then shows the training's share
    done (0% before it, 100% after it)."""
    name = phase_text(scrub_paths(s.phase, s.path.parent), lang)
    prog = s.phase_progress
    if prog and prog.get("total"):
        done, total = int(prog.get("done") or 0), int(prog["total"])
        pct = 100.0 * done / total
        parts = [name, f"{fmt_number(round(pct), lang)}%", t("run_progress.answers", lang, done=fmt_number(done, lang), total=fmt_number(total, lang))]
        if prog.get("eta_s") is not None:
            parts.append(t("finetune.progress.eta", lang, left=fmt_duration(prog["eta_s"])))
        return pct, " · ".join(parts)
    pct = 100.0 * s.step / s.max_steps if s.max_steps else 0.0
    parts = [name, f"{fmt_number(round(pct), lang)}%"]
    if s.phase_since:
        parts.append(t("run_progress.so_far", lang, took=fmt_duration(max(0.0, now - s.phase_since))))
    return pct, " · ".join(parts)


def _bar(pct: float, text: str) -> str:
    return (f"<div style='width:100%;background:#eee;border-radius:6px'><div style='width:{pct:.1f}%;background:#4f8ef7;height:14px;"
            f"border-radius:6px'></div></div><small>{text}</small>")


def loss_frame(losses: list[dict[str, Any]]) -> pd.DataFrame:
    """The loss curve (train, eval, and "pretraining": the built-in base's, while a run pretrains it first) as the line
    plot reads it."""
    df = pd.DataFrame(losses, columns=["step", "loss", "kind"])
    # numeric axes; the colour column as plain Python objects (pandas 3's inferred StringDtype is not plotted)
    return df.astype({"step": "int64", "loss": "float64", "kind": object})
