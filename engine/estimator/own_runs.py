"""This machine's finished runs as evidence for the estimator ("your runs").

Every training run writes the estimator's prediction (`memory` event: predicted_gib = what PyTorch will have
allocated at the peak, and the device name) and, when it finishes, the measured peak (`done` event: peak_gib, from
torch.cuda.max_memory_allocated on a GPU, the peak RSS of the process on a CPU). `run_points` reads those pairs
back; a run folder with a missing or damaged events.jsonl, or without both numbers, is skipped, never an error.

`capacity_correction` turns the GPU runs of this machine's card into a correction of the card's *usable memory*,
not of the physics: when this machine's runs measured r times what was predicted (the median ratio over its runs),
a job predicted to need X here will need about r·X, which is the same as a card whose usable memory (less
the CUDA context) is divided by r. The correction is
applied to the verdict for this machine only and is reported with the runs it comes from. CPU runs are shown but
never correct anything: their peak RSS includes the Python runtime and is not comparable with allocated bytes.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..runs import read_events
from .catalog import HardwareTier
from .texts import Msg

MIN_RATIO, MAX_RATIO = 0.5, 2.0  # beyond these a run measured something else (another process, a crash): ignored


@dataclass(frozen=True)
class RunPoint:
    """One finished run: what the estimator predicted and what was measured, in GiB."""

    name: str
    device: str  # device name as the run recorded it (e.g. "Tesla T4", or the CPU model)
    device_kind: str  # "cuda" | "cpu"
    method: str
    model: str
    predicted_gib: float
    measured_gib: float

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted_gib - self.measured_gib) / self.measured_gib


def run_points(runs_dir: Path) -> list[RunPoint]:
    """Predicted vs measured peak of every finished run under `runs_dir`, oldest first."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    points: list[tuple[float, RunPoint]] = []
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        try:
            events = read_events(run_dir)
        except OSError:
            continue  # unreadable: not evidence
        point = _point(run_dir.name, events)
        if point is not None:
            points.append(point)
    return [p for _, p in sorted(points, key=lambda tp: tp[0])]


def _point(name: str, events: list[dict]) -> tuple[float, RunPoint] | None:
    start: dict = {}
    predicted = measured = None
    device = ""
    done_time = 0.0
    for ev in events:
        if not isinstance(ev, dict):
            continue
        kind = ev.get("type")
        if kind == "start":
            start = ev
        elif kind == "memory":
            predicted, device = ev.get("predicted_gib", predicted), str(ev.get("device") or device)
        elif kind == "done":
            measured = ev.get("peak_gib")
            predicted = ev.get("predicted_gib", predicted)
            done_time = float(ev.get("time") or 0.0) if isinstance(ev.get("time"), (int, float)) else 0.0
    if not isinstance(predicted, (int, float)) or not isinstance(measured, (int, float)) or predicted <= 0 or measured <= 0:
        return None
    return done_time, RunPoint(name=name, device=device or str(start.get("device", "")), device_kind=str(start.get("device_kind", "")),
                               method=str(start.get("method", "")), model=str(start.get("base_model", "")),
                               predicted_gib=float(predicted), measured_gib=float(measured))


@dataclass(frozen=True)
class CapacityCorrection:
    """This machine's card with its usable memory corrected from its own runs."""

    tier: HardwareTier  # the card's tier with usable_gib corrected
    ratio: float  # median measured / predicted over the runs used
    runs: int  # how many runs it rests on
    why: str  # one line for people (a texts.Msg: English, or rendered in the visitor's language)


def capacity_correction(points: list[RunPoint], device_name: str, tier: HardwareTier) -> CapacityCorrection | None:
    """The usable memory of `tier` (this machine's card, named `device_name`) corrected by the median measured /
    predicted ratio of this card's GPU runs; None when it has none."""
    ratios = [p.measured_gib / p.predicted_gib for p in points
              if p.device_kind == "cuda" and p.device == device_name and MIN_RATIO <= p.measured_gib / p.predicted_gib <= MAX_RATIO]
    if not ratios or tier.kind != "gpu":
        return None
    ratio = statistics.median(ratios)
    # the ratio is on what PyTorch allocates: the CUDA context is the card's own and is not scaled
    usable = min(tier.cuda_context_gib + (tier.usable_gib - tier.cuda_context_gib) / ratio, tier.total_gib)
    why = Msg("estimator.runs.why_more" if ratio > 1 else "estimator.runs.why_less", runs=len(ratios), device=device_name,
              percent=round(abs(ratio - 1) * 100), usable=round(usable, 1), was=float(tier.usable_gib))
    return CapacityCorrection(dataclasses.replace(tier, usable_gib=round(usable, 3)), ratio, len(ratios), why)
