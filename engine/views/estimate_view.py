"""The Memory estimator panel's results for one query, in the visitor's language: the totals with their
cross-validated band, the breakdown (a stacked bar with a complete legend, and a table with the named physical
components inside the terms), memory per card as bars against each card's usable memory (and the same as a table),
the limits on the chosen card and the cheapest changes that make the job fit (or how much room is left); "your runs"
(this machine's predicted vs measured peaks and the correction of its card's usable memory they imply); the Fine-tune
form values for a query (with one of those changes applied); and what the panel opens on (a popular real model with
the usual training settings, on this machine's card)."""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from ..config import MemoryQuery
from ..errors import EngineError, for_people
from ..estimator import memory
from ..estimator.catalog import HardwareTier, catalog_lookup, choice_label, tier_by_name
from ..estimator.cpu_time import CPU_GFLOPS, cpu_step_seconds
from ..estimator.handoff import card_training_precision, train_values_for_card
from ..estimator.local_card import default_tier
from ..estimator.own_runs import RunPoint, capacity_correction, run_points
from ..estimator.recipes import tier_for_device
from ..estimator.texts import render, term_name, term_what, tier_name
from ..fields import from_flat
from ..hardware.device import DeviceInfo, detect_device
from ..i18n import fmt_number, norm_lang, t
from .estimate_charts import CardBar, breakdown_html, card_bars_html
from .offline import marked, online_now

# What the panel opens on: a popular, openly licensed 1.5B instruct model (offline from presets/catalog_arch.json, and
# a Hub id the Fine-tune panel can load), with checkpointing on as every QLoRA/LoRA recipe trains (the dataclass
# default stays off, so the CLI and the JSONL queries keep their meaning).
DEFAULT_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
FORM_DEFAULTS: dict[str, Any] = {"grad_ckpt": True}
VERDICT_ICONS = {"fits": "✔", "tight": "⚠", "no": "✖"}
CUDA_CONTEXT = "CUDA context"
# Terms said in CPU words on a CPU tier (estimator_cpu.* in the language files): no CUDA context, no nvidia-smi there.
CPU_TERMS = {CUDA_CONTEXT: "runtime", "fragmentation": "fragmentation"}


class Panel(NamedTuple):
    """The estimate for one query, ready to show."""

    totals: str  # markdown
    chart: str  # HTML: the breakdown as a stacked bar with its legend
    breakdown: pd.DataFrame  # term, GiB, what it is
    tiers: pd.DataFrame  # card, need, usable, verdict
    limits: str  # markdown: largest batch / sequence on the chosen card, and "make it fit"
    fit: pd.DataFrame  # the changes that make it fit, cheapest first (no rows: nothing to change)
    bars: str  # HTML: memory per card


def model_choices(lang: str = "en", online: bool | None = None) -> list[tuple[str, str]]:
    """The model dropdown as (label, value): the default model, then the built-in presets and the catalog. A catalog
    model's label holds its display name beside its catalog name (the dropdown filters on the label: "Llama 3.1 8B" and
    "llama-3.1-8b" both find it; a name typed another way is resolved by catalog_lookup); offline, the models that would
    be downloaded are marked as needing the internet (engine/views/offline.py). online: hub_online()'s answer, asked
    once here when not given."""
    online = online_now() if online is None else online
    out = []
    for value in [DEFAULT_MODEL, *(m for m in memory.model_choices() if m != DEFAULT_MODEL)]:
        entry = catalog_lookup(value) if not value.startswith("builtin:") and value != DEFAULT_MODEL else None
        out.append((marked(choice_label(entry) if entry is not None else value, value, online, lang), value))
    return out


def tier_choices(lang: str = "en") -> list[tuple[str, str]]:
    """The card dropdown: (name in `lang`, tier id); the value stays the id (API callers and the CLI use ids)."""
    return [(tier_name(tier, lang), tier.name) for tier in memory.hardware_tiers()]


def opening_tier() -> str:
    """The card the panel opens on: this machine's (engine/estimator/local_card.py)."""
    return default_tier()


def verdict_text(verdict: str, lang: str = "en") -> str:
    """fits / tight / no in words."""
    return t(f"estimator.verdict.{verdict}", lang) if verdict in VERDICT_ICONS else "?"


def _n(value: float, lang: str, digits: int = 2) -> str:
    """A GiB figure with a fixed number of decimals (3.00, not 3), in the language's notation (3,00 in Portuguese)."""
    text = f"{value:,.{digits}f}"
    return text.translate(str.maketrans(",.", ".,")) if norm_lang(lang) == "pt-BR" else text


def _gib(value: float, lang: str) -> str:
    return "<" + fmt_number(0.01, lang) if 0 < value < 0.005 else _n(value, lang)


def _count(n: int, lang: str) -> str:
    """A parameter count for people: 1.54 B, 18.5 M."""
    return f"{_n(n / 1e9, lang)} B" if n >= 1e9 else f"{fmt_number(round(n / 1e6, 1), lang, 1)} M"


def totals_md(q: MemoryQuery, est: memory.MemoryEstimate, lang: str = "en", chosen: str | None = None) -> str:
    """The two totals, which is which, the model and its size, and the band; per GPU under ddp/fsdp; with paged
    optimizer state, what must stay on the GPU, what can page out and what paging costs on the `chosen` card. On a CPU
    card, which is which in CPU words (the Python runtime, not a CUDA context; no nvidia-smi)."""
    md = (t("estimator.totals.head", lang, allocated=_n(est.allocated_gib, lang), total=_n(est.total_gib, lang))
          + "\n\n" + t("estimator.totals.model", lang, model=for_people(_shown_model(q, est), lang), params=_count(est.params, lang), trainable=_count(est.trainable_params, lang),
                       effective=fmt_number(q.batch * q.grad_accum, lang), phase=t(f"estimator.phase.{est.phase.replace(' ', '_')}", lang))
          + "\n\n" + band_line(est, lang) + "\n\n" + t("estimator_cpu.which" if cpu_tier(chosen) else "estimator.totals.which", lang))
    if q.distributed != "none" and q.gpus > 1 and q.task != "inference":
        md += "\n\n" + t("estimator.per_gpu", lang, mode=q.distributed, gpus=q.gpus,
                          what=t(f"estimator.per_gpu_what.{q.distributed}", lang, gpus=q.gpus))
    if est.pageable_gib > 0:
        md += "\n\n" + residency_md(est, lang, chosen)
    if cpu_tier(chosen) and (step := cpu_step_seconds(q, est.params)) is not None:  # fitting in RAM is not being practical
        md += "\n\n" + cpu_speed_md(q, step, lang)
    if est.notes:
        md += "\n\n" + "\n".join(f"- {render(n, lang)}" for n in est.notes)
    return md


def long_duration(seconds: float, lang: str = "en") -> str:
    """A rough duration for people: 0.4 s, 12 s, 5 min, 3 h, 4 days (never 96 h)."""
    if seconds < 10:
        return f"{fmt_number(round(seconds, 1), lang, 1)} s"
    for unit, size, limit in (("s", 1, 90), ("min", 60, 90 * 60), ("h", 3600, 48 * 3600)):
        if seconds < limit:
            return f"{fmt_number(round(seconds / size), lang)} {unit}"
    return t("cpu_time.days", lang, n=fmt_number(round(seconds / 86400), lang))


def cpu_speed_md(q: MemoryQuery, step_s: float, lang: str = "en") -> str:
    """How slow this training is on a CPU, roughly: one optimizer step and a thousand of them, with the advice for a
    slow one (a smaller model, or a GPU)."""
    tokens = q.batch * q.seq_len * max(1, q.grad_accum)
    md = t("cpu_time.line", lang, step=long_duration(step_s, lang), tokens=fmt_number(tokens, lang), thousand=long_duration(1000 * step_s, lang),
           gflops=fmt_number(CPU_GFLOPS, lang))
    return md + (" " + t("cpu_time.slow", lang) if 1000 * step_s > 12 * 3600 else "")  # longer than a night


def residency_md(est: memory.MemoryEstimate, lang: str = "en", chosen: str | None = None) -> str:
    """What must stay on the GPU and what can page out (paged optimizer state), and on the `chosen` card how much will
    live in CPU RAM and what that costs per optimizer step."""
    md = t("estimator.residency.line", lang, resident=_n(est.resident_gib, lang), pageable=_n(est.pageable_gib, lang))
    if chosen and chosen in est.paged_out_gib:
        name = tier_name(tier_by_name(chosen), lang)
        out = est.paged_out_gib[chosen]
        if out > 0:
            md += " " + t("estimator.residency.out", lang, card=name, out=_n(out, lang), seconds=_n(memory.paging_seconds(out), lang, 1))
        else:
            md += " " + t("estimator.residency.stays", lang, card=name)
    return md


def _shown_model(q: MemoryQuery, est: memory.MemoryEstimate) -> str:
    """The Hub id the person typed or picked (an instruct variant shares its base's architecture), else the model's label
    (a catalog name with its id, an uploaded config without its server path, a manual architecture)."""
    ref = q.model.strip()
    return ref if "/" in ref and not ref.startswith(("/", "~", ".")) and not ref.endswith(".json") and ":" not in ref else est.model


def band_line(est: memory.MemoryEstimate, lang: str = "en") -> str:
    """The band of an estimate in plain words, with the number of measurements behind it."""
    band = est.band
    if band is None or band.n == 0:
        return t("estimator.band.none", lang)
    lo, hi = est.range_gib(est.allocated_gib)
    return t("estimator.band.line", lang, low=_n(lo, lang), high=_n(hi, lang), n=band.n, category=band.category,
             few=t("estimator.band.few", lang) if band.n < 5 else "")


def cpu_total_gib(est: memory.MemoryEstimate, cpu: HardwareTier) -> float:
    """The whole process on a CPU tier: the estimate's total with the tier's runtime in place of the CUDA context."""
    return est.total_gib - est.breakdown_gib.get(CUDA_CONTEXT, 0.0) + cpu.cuda_context_gib


def cpu_terms(est: memory.MemoryEstimate, cpu: HardwareTier) -> memory.MemoryEstimate:
    """The estimate as a CPU tier sees it: the "CUDA context" term holds the tier's Python runtime (hardware.yaml), and
    the whole process's total counts that instead."""
    return dataclasses.replace(est, breakdown_gib={**est.breakdown_gib, CUDA_CONTEXT: cpu.cuda_context_gib}, total_gib=cpu_total_gib(est, cpu))


def cpu_tier(name: str | None) -> HardwareTier | None:
    """The hardware tier `name` when it is a CPU tier; None for a GPU card or an unknown name."""
    return next((c for c in memory.hardware_tiers() if c.name == name and c.kind == "cpu"), None)


def _term_texts(term: str, lang: str, cpu: bool) -> tuple[str, str]:
    """(name, what it is) of a memory term; on a CPU tier the terms that name GPU things are said in CPU words."""
    if cpu and term in CPU_TERMS:
        return t(f"estimator_cpu.{CPU_TERMS[term]}.name", lang), t(f"estimator_cpu.{CPU_TERMS[term]}.what", lang)
    return term_name(term, lang), term_what(term, lang)


def _breakdown(est: memory.MemoryEstimate, lang: str, cpu: bool = False) -> tuple[str, pd.DataFrame]:
    texts = {term: _term_texts(term, lang, cpu) for term in memory.TERMS}
    rows = [[texts[term][0], est.breakdown_gib.get(term, 0.0), texts[term][1]] for term in memory.TERMS]
    rows = [r for r in rows if round(r[1], 3) > 0]  # as memory.breakdown_rows rounds them
    segments = [(texts[term][0], est.breakdown_gib[term], i) for i, term in enumerate(memory.TERMS) if est.breakdown_gib.get(term, 0) > 0]
    rows = [[r[0], _gib(r[1], lang), r[2]] for r in rows]
    rows += [[f"↳ {render(name, lang)}", _gib(gib, lang), t("estimator.breakdown.inside", lang)] for name, gib in memory.detail_rows(est)]
    if est.pageable_gib > 0:  # the total split by where it can live: the verdict uses the resident part
        rows += [[f"= {render(name, lang)}", _gib(gib, lang), ""] for name, gib in memory.residency_rows(est)]
    cols = [t(f"estimator.breakdown.{c}", lang) for c in ("term", "gib", "what")]
    return breakdown_html(segments, est.total_gib, lang), pd.DataFrame(rows, columns=cols)


def _cards(q: MemoryQuery, est: memory.MemoryEstimate, chosen: str, lang: str) -> tuple[str, pd.DataFrame]:
    bars, rows = [], []
    band = est.band
    low, high = (band.low, band.high) if band is not None else (1.0, 1.0)
    for tier in memory.hardware_tiers():
        need, paged = memory.need_gib(q, tier)
        ctx = tier.cuda_context_gib
        verdict = est.tiers.get(tier.name, "")
        words = verdict_text(verdict, lang)
        name = tier_name(tier, lang)
        # what must stay resident (the verdict's basis); paged optimizer state is named beside it, never added
        bars.append(CardBar(name, tier.label, need, ctx + (need - ctx) * low, ctx + (need - ctx) * high,
                            tier.usable_gib, verdict, words, tier.name == chosen))
        shown = _n(need, lang) + (f" + {_n(paged, lang)} ⇄" if paged > 0 else "")
        if tier.kind == "cpu" and (step := cpu_step_seconds(q, est.params)) is not None:  # fits, and how slow it is there
            words += " · " + t("cpu_time.per_step", lang, time=long_duration(step, lang))
        rows.append([name, shown, _n(tier.usable_gib, lang), f"{VERDICT_ICONS.get(verdict, '')} {words}".strip()])
    cols = [t(f"estimator.cards.{c}", lang) for c in ("card", "need", "usable", "verdict")]
    return card_bars_html(bars, lang), pd.DataFrame(rows, columns=cols)


def limits_and_fit(q: MemoryQuery, tier: str, lang: str = "en") -> tuple[str, pd.DataFrame]:
    """(markdown, rows) for the chosen card: the largest batch and sequence that fit, then "make it fit": the
    cheapest changes, or how much room is left when nothing is needed. A card-specific failure (an unknown card) is
    the markdown, with no rows."""
    cols = [t(f"estimator.fit.col_{c}", lang) for c in ("rank", "change", "total", "cost")]
    try:
        card = tier_by_name(tier)
        name = tier_name(card, lang)
        mb, ms = memory.max_batch(q, tier), memory.max_seq_len(q, tier)
        if mb:
            lim = t("estimator.limits.line", lang, card=name, batch=fmt_number(mb, lang), seq=fmt_number(q.seq_len, lang),
                    seq_max=fmt_number(ms, lang), at_batch=fmt_number(q.batch, lang))
        else:
            lim = t("estimator.limits.none", lang, card=name, seq=fmt_number(q.seq_len, lang))
        sugg = memory.make_it_fit(q, tier)
        if sugg:
            rows = [[s.rank, render(s.description, lang), _n(s.new_total_gib, lang), render(s.cost, lang)] for s in sugg]
            return lim + "\n\n" + t("estimator.fit.some", lang, card=name), pd.DataFrame(rows, columns=cols)
        need, _paged = memory.need_gib(q, card)  # the resident part decides; paged state pages out (residency_md)
        spare = card.usable_gib - need
        if memory.tier_verdict(q, card) == "fits":
            room = t("estimator.fit.already", lang, card=name, spare=_n(max(spare, 0.0), lang))
        else:
            room = t("estimator.fit.tight", lang, card=name, need=_n(need, lang), usable=_n(card.usable_gib, lang))
        return lim + "\n\n" + room, pd.DataFrame([], columns=cols)
    except EngineError as exc:
        return f"⚠ {exc.render(lang)}", pd.DataFrame([], columns=cols)


def estimate_outputs(q: MemoryQuery, tier: str, lang: str = "en") -> Panel:
    """Everything the panel shows for the query on the card `tier`, in `lang`. Raises EngineError when the query
    cannot be estimated; a card-specific failure becomes the limits text."""
    est = memory.estimate(q)
    cpu = cpu_tier(tier)  # a CPU tier: CPU words
    shown = cpu_terms(est, cpu) if cpu is not None else est
    chart, breakdown = _breakdown(shown, lang, cpu is not None)
    bars, tiers = _cards(q, est, tier, lang)
    limits, fit = limits_and_fit(q, tier, lang)
    return Panel(totals_md(q, shown, lang, tier), chart, breakdown, tiers, limits, fit, bars)


def estimate_or_warning(query: Callable[[], MemoryQuery], tier: str, runs_dir: Path | None = None, shared: bool = False,
                        lang: str = "en") -> tuple[Any, ...]:
    """The panel's outputs in the page's order (totals, chart, breakdown, verdict table, limits, make-it-fit, your
    runs text and frame, card bars) for the query that query() makes; an engine error (making the query or estimating
    it) is shown in place of the totals and the other outputs are emptied: the panel updates as the form changes and
    never raises."""
    try:
        q = query()
        p = estimate_outputs(q, tier, lang)
        return (*p[:6], *your_runs_outputs(q, runs_dir, shared, lang=lang), p.bars)
    except EngineError as exc:
        return f"**⚠ {exc.render(lang)}**", "", None, None, "", None, "", None, ""


@functools.lru_cache(maxsize=1)
def this_device() -> DeviceInfo:
    """This machine's device, detected once per process (it does not change while the app runs)."""
    return detect_device()


def runs_columns(lang: str = "en") -> list[str]:
    """The scatter's columns in `lang`: predicted, measured, error %, run, device."""
    return [t(f"estimator.runs.col_{c}", lang) for c in ("predicted", "measured", "error", "run", "device")]


def runs_frame(points: list[RunPoint], lang: str = "en") -> pd.DataFrame:
    """The scatter of predicted vs measured peak, one row per finished run."""
    return pd.DataFrame([[round(p.predicted_gib, 3), round(p.measured_gib, 3), round(100 * p.error, 1), p.name, p.device or p.device_kind or "?"]
                         for p in points], columns=runs_columns(lang))


def your_runs_outputs(q: MemoryQuery, runs_dir: Path | None, shared: bool = False, device: DeviceInfo | None = None,
                      lang: str = "en") -> tuple[str, pd.DataFrame | None]:
    """(markdown, scatter frame) of this machine's finished runs and, on a GPU with runs, the verdict for this query
    on this machine's card with its usable memory corrected from them. On a shared link nothing is listed: the runs
    folder holds other visitors' runs."""
    if shared:
        return t("estimator.runs.shared", lang), None
    if runs_dir is None:
        return "", None
    points = run_points(runs_dir)
    if not points:
        return t("estimator.runs.none", lang), None
    errs = [abs(p.error) * 100 for p in points]
    md = t("estimator.runs.summary", lang, n=len(points), error=fmt_number(round(statistics.median(errs)), lang))
    device = device or this_device()
    if device.kind == "cuda":
        tier = tier_by_name(tier_for_device(device))
        corr = capacity_correction(points, device.name, tier)
        if corr is not None:
            verdict = verdict_text(memory.tier_verdict(q, corr.tier), lang)
            md += "\n\n" + t("estimator.runs.this_machine", lang, device=device.name, verdict=verdict, why=render(corr.why, lang))
    if any(p.device_kind == "cpu" for p in points):
        md += "\n\n" + t("estimator.runs.cpu", lang)
    return md, runs_frame(points, lang)


def memory_status_line(predicted_gib: float | None, measured_gib: float | None, device_kind: str, lang: str = "en") -> str:
    """A run's "memory: predicted / measured" line that says which figure is which: the prediction is the model's
    training memory; on a GPU the measurement is PyTorch's peak, on a CPU the whole process's peak RSS (Python, PyTorch,
    data and model), which is why it is larger there. For the run status (engine/views/run_view.py)."""
    kind = "cpu" if device_kind == "cpu" else "gpu"
    return t(f"estimator.memory_line.{kind}", lang, predicted=_n(predicted_gib or 0.0, lang), measured=_n(measured_gib or 0.0, lang))


def finetune_values(q: MemoryQuery, tier: str, pick: int | None) -> tuple[dict[str, Any], int | None]:
    """The Fine-tune form values (dotted TrainConfig names) for the query planned on the card `tier`, with make-it-fit
    suggestion #pick applied when there is one; and the rank of the suggestion applied (None: none). The values are the
    card's (engine/estimator/handoff.py train_values_for_card: its precision, the method's learning rate)."""
    sugg = memory.make_it_fit(q, tier) if pick else []
    chosen = next((s for s in sugg if s.rank == int(pick)), None)
    if chosen is not None:
        q = from_flat(MemoryQuery, {**{k: getattr(q, k) for k in q.__dataclass_fields__}, **chosen.changes})
    return train_values_for_card(q, tier), None if chosen is None else chosen.rank


def form_defaults(tier: str) -> dict[str, Any]:
    """The estimator form's opening values on the card `tier` (FORM_DEFAULTS, the training precision that card takes)."""
    default = MemoryQuery.__dataclass_fields__["training_precision"].default
    return {**FORM_DEFAULTS, "training_precision": card_training_precision(str(default), tier)}


def precision_for_card(training_precision: str, tier: str) -> str:
    """The estimator's training precision when the card `tier` is picked (never bf16 on a card without it)."""
    return card_training_precision(training_precision, tier)
