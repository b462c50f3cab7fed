"""The Memory estimator panel's results for one query: the totals with their cross-validated band, the breakdown
chart and table (with the named physical components inside the terms), the verdict per card, the limits on the
chosen card and the cheapest changes that make the job fit; "your runs" (this machine's predicted vs measured peaks
and the correction of its card's usable memory they imply); and the Fine-tune form values for a query (with one of
those changes applied)."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import MemoryQuery
from ..errors import EngineError
from ..estimator import memory
from ..estimator.catalog import tier_by_name
from ..estimator.handoff import train_values_from_query
from ..estimator.own_runs import RunPoint, capacity_correction, run_points
from ..estimator.recipes import tier_for_device
from ..fields import from_flat
from ..hardware.device import DeviceInfo, detect_device

VERDICTS = {"fits": "fits", "tight": "tight", "no": "does not fit"}


def estimate_outputs(q: MemoryQuery, tier: str) -> tuple[str, pd.DataFrame, list[list[Any]], list[list[Any]], str, list[list[Any]]]:
    """(totals markdown, chart frame, breakdown rows, verdict rows, limits markdown, make-it-fit rows) for the query on
    the card `tier`. Raises EngineError when the query cannot be estimated; a card-specific failure becomes the limits text."""
    est = memory.estimate(q)
    rows = memory.breakdown_rows(est) + [[f"↳ {name}", gib, "a component inside the terms above"] for name, gib in memory.detail_rows(est)]
    chart_df = pd.DataFrame([{"job": q.task, "term": r[0], "GiB": r[1]} for r in rows if r[1] > 0 and not r[0].startswith("↳")])
    tier_rows = [[t.label, t.usable_gib, VERDICTS.get(est.tiers.get(t.name, ""), "?")] for t in memory.hardware_tiers()]
    md = (f"### {est.allocated_gib:.2f} GiB allocated by PyTorch · {est.total_gib:.2f} GiB in nvidia-smi\n"
          f"{est.params / 1e6:,.1f} M parameters, {est.trainable_params / 1e6:,.2f} M trainable · effective batch {q.batch * q.grad_accum}"
          f"\n\n{band_line(est)}")
    if est.notes:
        md += "\n\n" + "\n".join(f"- {n}" for n in est.notes)
    try:
        mb, ms = memory.max_batch(q, tier), memory.max_seq_len(q, tier)
        lim = f"On **{tier}**: largest batch that fits **{mb}** (at seq {q.seq_len}), longest sequence **{ms}** (at batch {q.batch})."
        sugg = memory.make_it_fit(q, tier)
        fit_rows = [[s.rank, s.description, round(s.new_total_gib, 2), s.cost] for s in sugg]
    except EngineError as exc:
        lim, fit_rows = f"⚠ {exc}", []
    return md, chart_df, rows, tier_rows, lim, fit_rows


def band_line(est: memory.MemoryEstimate) -> str:
    """The band of an estimate in plain words, with the number of measurements behind it."""
    band = est.band
    if band is None or band.n == 0:
        return "No published measurement validates this kind of job yet: the figure has no error band."
    lo, hi = est.range_gib(est.allocated_gib)
    few = " (few measurements: treat it as indicative)" if band.n < 5 else ""
    return (f"Likely **{lo:.2f}–{hi:.2f} GiB** allocated (80% band from the leave-one-source-out error of **{band.n}** "
            f"published {band.category} measurements{few}). A card is *tight* when its usable memory falls inside the band.")


def estimate_or_warning(query: Callable[[], MemoryQuery], tier: str, runs_dir: Path | None = None, shared: bool = False) -> tuple[Any, ...]:
    """estimate_outputs + your_runs_outputs for the query that query() makes; an engine error (making the query or
    estimating it) is shown in place of the totals and the other outputs are emptied: the panel updates as the form
    changes and never raises."""
    try:
        q = query()
        return (*estimate_outputs(q, tier), *your_runs_outputs(q, runs_dir, shared))
    except EngineError as exc:
        return f"**⚠ {exc}**", None, None, None, "", None, "", None


@functools.lru_cache(maxsize=1)
def this_device() -> DeviceInfo:
    """This machine's device, detected once per process (it does not change while the app runs)."""
    return detect_device()


def runs_frame(points: list[RunPoint]) -> pd.DataFrame:
    """The scatter of predicted vs measured peak, one row per finished run."""
    return pd.DataFrame([{"predicted GiB": round(p.predicted_gib, 3), "measured GiB": round(p.measured_gib, 3),
                          "error %": round(100 * p.error, 1), "run": p.name, "device": p.device or p.device_kind or "?"} for p in points],
                        columns=["predicted GiB", "measured GiB", "error %", "run", "device"])


def your_runs_outputs(q: MemoryQuery, runs_dir: Path | None, shared: bool = False,
                      device: DeviceInfo | None = None) -> tuple[str, pd.DataFrame | None]:
    """(markdown, scatter frame) of this machine's finished runs and, on a GPU with runs, the verdict for this query
    on this machine's card with its usable memory corrected from them. On a shared link nothing is listed: the runs
    folder holds other visitors' runs."""
    if shared:
        return "Your runs are not listed on a shared link.", None
    if runs_dir is None:
        return "", None
    points = run_points(runs_dir)
    if not points:
        return "No finished run yet: after a run, its predicted and measured peak memory appear here.", None
    errs = [abs(p.error) * 100 for p in points]
    md = f"**Your runs**: {len(points)} finished, median error {statistics.median(errs):.0f}% (predicted vs measured peak allocated)."
    device = device or this_device()
    if device.kind == "cuda":
        tier = tier_by_name(tier_for_device(device))
        corr = capacity_correction(points, device.name, tier)
        if corr is not None:
            verdict = VERDICTS[memory.tier_verdict(q, corr.tier)]
            md += f"\n\nOn this machine ({device.name}): **{verdict}**. {corr.why}"
    else:
        md += "\n\nCPU runs measure the process's whole memory (RSS), so they do not correct any card's capacity."
    return md, runs_frame(points)


def finetune_values(q: MemoryQuery, tier: str, pick: int | None) -> tuple[dict[str, Any], int | None]:
    """The Fine-tune form values (dotted TrainConfig names) for the query, with make-it-fit suggestion #pick applied
    when there is one; and the rank of the suggestion applied (None: none)."""
    sugg = memory.make_it_fit(q, tier) if pick else []
    chosen = next((s for s in sugg if s.rank == int(pick)), None)
    if chosen is not None:
        q = from_flat(MemoryQuery, {**{k: getattr(q, k) for k in q.__dataclass_fields__}, **chosen.changes})
    return train_values_from_query(q), None if chosen is None else chosen.rank
