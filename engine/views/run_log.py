"""The run's log for people: one short line per event of the run's events.jsonl, in the visitor's language.

The training subprocess writes structured events (engine/training/callbacks.py, engine/training/run.py); this module
renders them ("step 120/1000 · loss 1.234 · lr 0.0008 · 1,234 tok/s · 0.52 GiB") instead of the Trainer's raw Python
dicts in train.log. Free-text phases are written by the subprocess in English; the common ones are recognised and
rendered in the visitor's language, any other is shown as written. Numbers go through `fmt_number` (never 8.0e-04).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import render_record
from ..i18n import fmt_number, norm_lang, t

LOG_LINES = 200  # the newest lines the log box shows


def fmt_plain(value: float, lang: str = "en", significant: int = 2) -> str:
    """A small number as plain decimals with `significant` digits: 8e-4 -> 0.0008, 2.5e-5 -> 0.000025 (0,000025 in
    pt-BR), 1.5 -> 1.5; never scientific notation."""
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits = min(12, max(0, significant - 1 - math.floor(math.log10(abs(x)))))
    text = fmt_number(round(x, digits), lang, digits) if digits else fmt_number(round(x), lang)
    sep = "," if norm_lang(lang) == "pt-BR" else "."
    return text.rstrip("0").rstrip(sep) if sep in text else text


def fmt_duration(seconds: float | None) -> str:
    """45 s, 2 min 05 s, 1 h 03 min, and past 48 hours days: 122 d 01 h (not "2928 h 53 min"); the same abbreviations in
    English and Portuguese."""
    if seconds is None:
        return ""
    s = max(0, int(round(float(seconds))))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 48 * 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"


def fmt_signed(value: float, lang: str = "en") -> str:
    """A reward with its sign, in the language's notation: +1, +0,33 (pt-BR), −0.5; 0 without a sign."""
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return fmt_plain(x, lang)
    return ("+" if x > 0 else "−") + fmt_plain(abs(x), lang)


def fmt_loss(value: float | None, lang: str = "en") -> str:
    """A loss with three decimals (1.234 / 1,234); a dash when there is none."""
    if value is None:
        return "—"
    text = f"{float(value):,.3f}"  # always three decimals (fmt_number would write 2.0 as "2")
    return text.replace(",", "\0").replace(".", ",").replace("\0", ".") if norm_lang(lang) == "pt-BR" else text


# Phases the subprocess writes in English (engine/training/*.py), matched to a language key; groups become parameters.
PHASES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^training$"), "finetune.phase.training"),
    (re.compile(r"^tokenizing the data$"), "finetune.phase.tokenizing"),
    (re.compile(r"^saving$"), "finetune.phase.saving"),
    (re.compile(r"^training a tokenizer on the dataset$"), "finetune.phase.tokenizer"),
    (re.compile(r"^loading the teacher (?P<what>.+)$"), "finetune.phase.teacher"),
    (re.compile(r"^loading (?P<what>.+)$"), "finetune.phase.loading"),
    (re.compile(r"^scoring the date task \((?P<when>\w+)\)$"), "finetune.phase.scoring"),
    (re.compile(r"^pretraining the built-in model '(?P<what>[^']+)'"), "finetune.phase.pretraining"),
    (re.compile(r"^merging the adapter of (?P<what>.+) into its base"), "finetune.phase.merging_adapter"),
    (re.compile(r"^loss (?P<loss>[\d.]+) reached the stop-at-loss threshold (?P<threshold>[\d.]+)"), "finetune.phase.stop_at_loss"),
    (re.compile(r"^early stopping"), "finetune.phase.early_stop"),
    (re.compile(r"^KTO: (?P<good>\d+) good and (?P<bad>\d+) bad answers; loss weights (?P<good_weight>[\d.]+) and (?P<bad_weight>[\d.]+)$"),
     "preference.msg.kto_weights"),
    (re.compile(r"^mixing the adapters of (?P<what>.+) with (?P<how>\w+)$"), "mix.phase.mixing"),  # a mix job (engine/training/mix.py)
    (re.compile(r"^scoring the date task on (?P<what>.+)$"), "mix.phase.scoring"),
    # the preference methods (engine/training/preference.py, grpo.py, mistake_data.py)
    (re.compile(r"^DPO reference: the starting model through a frozen copy of the adapter"), "pref_run.phase.dpo_ref_adapter"),
    (re.compile(r"^DPO reference: a frozen copy of the starting model"), "pref_run.phase.dpo_ref_full"),
    (re.compile(r"^GRPO: (?P<n>\d+) answers per prompt, rewards (?P<reward>.+)$"), "pref_run.phase.grpo"),
    (re.compile(r"^making pairs from the starting model's mistakes on the date task$"), "pref_run.phase.mistakes"),
]


def when_text(when: str, lang: str = "en") -> str:
    """before / after / teacher (a task score's moment) in the visitor's language."""
    return t(f"finetune.task.when.{when}", lang) if when in ("before", "after", "teacher") else when


def phase_text(phase: str, lang: str = "en") -> str:
    """A phase written by the training subprocess, in the visitor's language when it is one of the known ones."""
    for pattern, key in PHASES:
        m = pattern.match(phase or "")
        if m:
            params = m.groupdict()
            if "when" in params:
                params["when"] = when_text(params["when"], lang)
            for name in ("loss", "threshold"):
                if name in params:
                    params[name] = fmt_plain(float(params[name]), lang, 4)
            return t(key, lang, **params)
    return phase or ""


def progress_line(ev: dict[str, Any], lang: str = "en", *, pretraining: bool = False) -> str:
    """step 120/1000 · loss 1.234 · lr 0.0008 · 1,234 tok/s · 0.52 GiB (missing values are left out)."""
    parts = [t("finetune.log.pretrain_step" if pretraining else "finetune.log.step", lang, step=fmt_number(ev.get("step", 0), lang),
               total=fmt_number(ev.get("max_steps", 0), lang))]
    if ev.get("loss") is not None:
        parts.append(t("finetune.log.loss", lang, loss=fmt_loss(ev["loss"], lang)))
    if ev.get("lr") is not None:
        parts.append(t("finetune.log.lr", lang, lr=fmt_plain(ev["lr"], lang)))
    if ev.get("tokens_per_s"):
        parts.append(t("finetune.log.speed", lang, speed=fmt_number(round(ev["tokens_per_s"]), lang)))
    if ev.get("mem_gib") is not None:
        parts.append(fmt_number(ev["mem_gib"], lang) + " GiB")
    parts += objective_parts(ev, lang)
    return " · ".join(parts)


def objective_parts(ev: dict[str, Any], lang: str = "en") -> list[str]:
    """What DPO/ORPO/KTO (reward margin, preference accuracy, KTO's KL estimate) and GRPO (mean reward ± spread, answer length) optimise, from a
    progress event (engine/training/callbacks.py OBJECTIVE_METRICS); [] for the other methods."""
    parts = []
    if ev.get("reward_margin") is not None:
        parts.append(t("preference.log.margin", lang, margin=fmt_plain(ev["reward_margin"], lang)))
    if ev.get("pref_accuracy") is not None:
        parts.append(t("preference.log.accuracy", lang, pct=fmt_number(round(100 * ev["pref_accuracy"]), lang)))
    if ev.get("reward_mean") is not None:
        parts.append(t("preference.log.reward", lang, reward=fmt_plain(ev["reward_mean"], lang), std=fmt_plain(ev.get("reward_std") or 0.0, lang)))
    if ev.get("completion_len") is not None:
        parts.append(t("preference.log.length", lang, n=fmt_number(round(ev["completion_len"], 1), lang, 1)))
    if ev.get("kl") is not None:  # KTO's KL estimate (policy vs reference)
        parts.append(t("preference.log.kl", lang, kl=fmt_plain(ev["kl"], lang)))
    return parts


def _completions_line(ev: dict[str, Any], lang: str) -> str:
    """GRPO's sampled answers of a logging step with their rewards: ⚄ step 30: +1 «1953-10-13» (expected «1953-10-13») | ..."""
    shown = [t("preference.log.sample", lang, reward=fmt_signed(s.get("reward") or 0.0, lang), answer=str(s.get("completion", "")).strip()[:60],
               expected=str(s.get("answer") or "")[:40]) for s in ev.get("samples") or []]
    return "⚄ " + t("preference.log.samples", lang, step=fmt_number(ev.get("step", 0), lang)) + " " + " | ".join(shown)


def _eval_line(ev: dict[str, Any], lang: str, pretraining: bool = False) -> str:
    ppl = ev.get("perplexity")
    key = "finetune.log.eval_ppl" if ppl is not None else "finetune.log.eval"
    line = t(key, lang, step=fmt_number(ev.get("step", 0), lang), loss=fmt_loss(ev.get("eval_loss"), lang),
             ppl=fmt_number(ppl, lang) if ppl is not None else "")
    if ev.get("pref_accuracy") is not None:  # DPO/ORPO/KTO on held-out pairs: how often the chosen answer wins
        line += " · " + t("preference.log.accuracy", lang, pct=fmt_number(round(100 * ev["pref_accuracy"]), lang))
    return (t("finetune.log.pretraining", lang) + " · " + line) if pretraining else line


def _start_line(ev: dict[str, Any], lang: str) -> str:
    key = "finetune.log.resumed" if ev.get("resumed_from") else "finetune.log.started"
    return "▶ " + t(key, lang, device=ev.get("device", "?"), dtype=ev.get("dtype", "?"), checkpoint=ev.get("resumed_from") or "")


def _data_line(ev: dict[str, Any], lang: str) -> str:
    return t("finetune.log.data", lang, train=fmt_number(ev.get("train_examples", 0), lang), eval=fmt_number(ev.get("eval_examples", 0), lang),
             dropped=fmt_number(ev.get("dropped", 0), lang))


def _task_line(ev: dict[str, Any], lang: str) -> str:
    acc, n = ev.get("accuracy") or 0.0, ev.get("n") or 0
    return "◎ " + t("finetune.log.task", lang, when=when_text(ev.get("when", ""), lang), pct=fmt_number(round(100 * acc), lang),
                    right=fmt_number(round(acc * n), lang), n=fmt_number(n, lang))


def _done_line(ev: dict[str, Any], lang: str) -> str:
    """The run's last line: the last logged step's loss, and the run's mean loss (what the Trainer reports) named as the
    mean; a run recorded before the last step's loss was written shows the mean alone, named as such."""
    key = "right_first_try.done" if ev.get("last_loss") is not None else "right_first_try.done_mean"
    return "✔ " + t(key, lang, steps=fmt_number(ev.get("steps", 0), lang), took=fmt_duration(ev.get("duration_s")),
                    last=fmt_loss(ev.get("last_loss"), lang), mean=fmt_loss(ev.get("final_loss"), lang), output=f"{ev.get('output', '?')}/")


def _stopped_line(ev: dict[str, Any], lang: str) -> str:
    key = "finetune.log.stopped_ckpt" if ev.get("checkpoint") else "finetune.log.stopped"
    return "‖ " + t(key, lang, step=fmt_number(ev.get("step", 0), lang), checkpoint=ev.get("checkpoint") or "")


def _early_line(ev: dict[str, Any], lang: str) -> str:
    return "■ " + t("finetune.log.early_stop", lang, step=fmt_number(ev.get("step", 0), lang), n=ev.get("patience", "?"),
                    best=fmt_loss(ev.get("best_eval_loss"), lang), best_step=ev.get("best_step", "?"))


RENDER: dict[str, Callable[[dict[str, Any], str], str]] = {
    "start": _start_line,
    "phase": lambda ev, lang: "· " + phase_text(ev.get("phase", ""), lang),
    "memory": lambda ev, lang: t("finetune.log.memory", lang, gib=fmt_number(ev.get("predicted_gib") or 0, lang)),
    "data": _data_line,
    "progress": progress_line,
    "base_progress": lambda ev, lang: progress_line(ev, lang, pretraining=True),
    "eval": _eval_line,
    "base_eval": lambda ev, lang: _eval_line(ev, lang, pretraining=True),
    "task_score": _task_line,
    "early_stop": _early_line,
    "done": _done_line,
    "stopped": _stopped_line,
    "error": lambda ev, lang: "✖ " + t("finetune.log.error", lang, message=render_record(ev.get("i18n"), ev.get("message", ""), lang)),
    "distill": lambda ev, lang: t("finetune.log.distill", lang, teacher=ev.get("teacher", "?"), student=ev.get("student", "?")),
    "push": lambda ev, lang: "⬆ " + t("finetune.log.push", lang, url=ev.get("url", "")),
    "export": lambda ev, lang: "⬇ " + t("finetune.log.export", lang, what=ev.get("gguf_type") or ev.get("format", "")),
    "completions": _completions_line,  # GRPO's sampled answers (engine/training/grpo.py)
    "mistakes": lambda ev, lang: "◇ " + t("pref_run.log.mistakes", lang, prompts=fmt_number(ev.get("prompts", 0), lang),
                                          answers=fmt_number(ev.get("answers", 0), lang), correct=fmt_number(ev.get("correct", 0), lang),
                                          pairs=fmt_number(ev.get("pairs", 0), lang)),
    "mistakes_steps": lambda ev, lang: "◇ " + t("pref_run.log.mistakes_steps", lang, pairs=fmt_number(ev.get("pairs", 0), lang),
                                                steps=fmt_number(ev.get("steps", 0), lang), asked=fmt_number(ev.get("asked", 0), lang),
                                                passes=fmt_number(ev.get("passes", 0), lang)),
}


def event_line(ev: dict[str, Any], lang: str = "en") -> str | None:
    """One event as a line for people; None for events that say nothing to a person (sample generations...)."""
    render = RENDER.get(str(ev.get("type")))
    return render(ev, lang) if render else None


def log_text(events: Iterable[dict[str, Any]], lang: str = "en", n_lines: int = LOG_LINES, scrub: Callable[[str], str] = str) -> str:
    """The newest `n_lines` lines of the run's log for people, oldest first (the box follows the newest line). `scrub`
    hides the server's folders in texts that may name them (phases that name a local model, error messages)."""
    lines = [scrub(line) for ev in events if (line := event_line(ev, lang))]
    return "\n".join(lines[-n_lines:])
