"""The Memory estimator panel's results for one query: the totals, the breakdown chart and table, the verdict per
card, the limits on the chosen card and the cheapest changes that make the job fit; and the Fine-tune form values
for a query (with one of those changes applied)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from ..config import MemoryQuery
from ..errors import EngineError
from ..estimator import memory
from ..estimator.handoff import train_values_from_query
from ..fields import from_flat

VERDICTS = {"fits": "fits", "tight": "tight", "no": "does not fit"}


def estimate_outputs(q: MemoryQuery, tier: str) -> tuple[str, pd.DataFrame, list[list[Any]], list[list[Any]], str, list[list[Any]]]:
    """(totals markdown, chart frame, breakdown rows, verdict rows, limits markdown, make-it-fit rows) for the query on
    the card `tier`. Raises EngineError when the query cannot be estimated; a card-specific failure becomes the limits text."""
    est = memory.estimate(q)
    rows = memory.breakdown_rows(est)
    chart_df = pd.DataFrame([{"job": q.task, "term": r[0], "GiB": r[1]} for r in rows if r[1] > 0])
    tier_rows = [[t.label, t.usable_gib, VERDICTS.get(est.tiers.get(t.name, ""), "?")] for t in memory.hardware_tiers()]
    md = (f"### {est.allocated_gib:.2f} GiB allocated by PyTorch · {est.total_gib:.2f} GiB in nvidia-smi\n"
          f"{est.params / 1e6:,.1f} M parameters, {est.trainable_params / 1e6:,.2f} M trainable · effective batch {q.batch * q.grad_accum}")
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


def estimate_or_warning(query: Callable[[], MemoryQuery], tier: str) -> tuple[Any, ...]:
    """estimate_outputs for the query that query() makes; an engine error (making the query or estimating it) is shown in
    place of the totals and the other outputs are emptied: the panel updates as the form changes and never raises."""
    try:
        return estimate_outputs(query(), tier)
    except EngineError as exc:
        return f"**⚠ {exc}**", None, None, None, "", None


def finetune_values(q: MemoryQuery, tier: str, pick: int | None) -> tuple[dict[str, Any], int | None]:
    """The Fine-tune form values (dotted TrainConfig names) for the query, with make-it-fit suggestion #pick applied
    when there is one; and the rank of the suggestion applied (None: none)."""
    sugg = memory.make_it_fit(q, tier) if pick else []
    chosen = next((s for s in sugg if s.rank == int(pick)), None)
    if chosen is not None:
        q = from_flat(MemoryQuery, {**{k: getattr(q, k) for k in q.__dataclass_fields__}, **chosen.changes})
    return train_values_from_query(q), None if chosen is None else chosen.rank
