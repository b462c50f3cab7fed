"""How sure the memory estimator is: the fit of its few calibrated coefficients, leave-one-source-out validation,
and the ± band every estimate carries.

The estimator is physics (engine/estimator/memory.py) plus a handful of coefficients in `memory.CAL` that are set
from published measurements rather than derived from code (FITTED below). Scoring it on the rows that set those
coefficients flatters it, so bench/memory_accuracy.py validates it leave-one-source-out (LOSO): for every source
(a paper, a README table, a benchmark), fit the coefficients on all the other sources, then score the rows of the
source left out. The LOSO errors per job category are the honest accuracy; `--write-bands` stores them in
presets/estimator_accuracy.yaml (data, with the number of measurements behind each figure), and `band_for` turns
them into the band of one estimate:

    80% band on the measured peak = [need / (1 + q90), need / (1 + q10)]

with q10/q90 the 10th/90th percentiles of the signed relative error (prediction - measured) / measured, widened
to include the error on the nearest measured configuration (same model and job) when there is one.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import EngineError
from .catalog import PRESETS_DIR

ACCURACY_FILE = PRESETS_DIR / "estimator_accuracy.yaml"
CATEGORIES = ("inference", "LoRA", "QLoRA", "full")
_TASK_CATEGORY = {"inference": "inference", "lora": "LoRA", "qlora": "QLoRA", "full": "full"}


@dataclass(frozen=True)
class Coefficient:
    """A calibrated coefficient of memory.CAL: the values the fit may try and its physical prior (kept when the
    training rows cannot tell the values apart)."""

    grid: tuple[float, ...]
    prior: float
    why: str


def _grid(lo: float, hi: float, step: float) -> tuple[float, ...]:
    n = int(round((hi - lo) / step))
    return tuple(round(lo + i * step, 6) for i in range(n + 1))


# The coefficients fitted from data. Everything else in memory.CAL is derived (see its comments).
FITTED: dict[str, Coefficient] = {
    "frozen_input_saved": Coefficient(_grid(0.0, 1.0, 0.125), 0.0,
                                      "share of frozen linear inputs kept for backward (0 in torch 2.13; older stacks kept them)"),
    "frag_dynamic": Coefficient(_grid(0.0, 0.4, 0.025), 0.15, "allocator reserve as a share of the memory that comes and goes"),
    "frag_static": Coefficient(_grid(0.0, 0.1, 0.01), 0.02, "allocator reserve as a share of the static memory"),
    "cuda_context_gib": Coefficient(_grid(0.25, 1.5, 0.05), 0.5, "CUDA context when no card generation is known"),
}
PRIOR_WEIGHT = 0.002  # objective units (mean |log error|) per grid step away from the prior: breaks ties only


def log_error(pred: float, measured: float) -> float:
    """|log(pred / measured)|: symmetric in over/under-prediction; the fit minimizes its mean."""
    return abs(math.log(max(pred, 1e-9) / measured))


def fit_coefficients(rows: Sequence[dict[str, Any]], predict: Callable[[dict[str, Any], dict[str, float]], float],
                     start: dict[str, float], specs: dict[str, Coefficient] | None = None, passes: int = 2) -> dict[str, float]:
    """Coordinate descent over each coefficient's grid, minimizing the mean |log error| of predict(row, coefs)
    against row["measured"] (plus a tiny pull toward the prior, so coefficients the rows do not constrain stay at
    their physical value). `start` gives the values of every coefficient before the fit."""
    specs = FITTED if specs is None else specs
    coefs = dict(start)
    if not rows:
        return coefs

    def objective(c: dict[str, float]) -> float:
        err = sum(log_error(predict(r, c), r["measured"]) for r in rows) / len(rows)
        pull = sum(abs(c[k] - s.prior) / max(s.grid[1] - s.grid[0], 1e-9) for k, s in specs.items())
        return err + PRIOR_WEIGHT * pull

    for _ in range(passes):
        for name, spec in specs.items():
            best = min(spec.grid, key=lambda v: objective({**coefs, name: v}))
            coefs[name] = best
    return coefs


def leave_one_source_out(rows: Sequence[dict[str, Any]], fit: Callable[[list[dict[str, Any]]], dict[str, float]],
                         predict: Callable[[dict[str, Any], dict[str, float]], float]) -> list[float]:
    """Signed relative error (pred - measured) / measured of every row, each predicted with the coefficients fitted on
    the rows of all the *other* sources (row["source"]); in the order of `rows`."""
    out: list[float] = [math.nan] * len(rows)
    for source in dict.fromkeys(r["source"] for r in rows):
        train = [r for r in rows if r["source"] != source]
        coefs = fit(train)
        for i, r in enumerate(rows):
            if r["source"] == source:
                out[i] = (predict(r, coefs) - r["measured"]) / r["measured"]
    return out


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]); nan for no values."""
    if not values:
        return math.nan
    vals = sorted(values)
    k = (len(vals) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def error_summary(errors: Sequence[float]) -> dict[str, Any]:
    """n, median and p90 of |error|, and the 10th/90th percentiles of the signed error (the band)."""
    errs = [e for e in errors if not math.isnan(e)]
    if not errs:
        return {"n": 0}
    absolute = [abs(e) for e in errs]
    return {"n": len(errs), "median_abs": round(statistics.median(absolute), 4), "p90_abs": round(quantile(absolute, 0.9), 4),
            "q10": round(quantile(errs, 0.1), 4), "q90": round(quantile(errs, 0.9), 4)}


# --------------------------------------------------------------------------------------------------
# Bands
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Band:
    """Where the measured peak is expected to lie, as factors of the predicted peak: [low, high] (low <= 1 <= high)."""

    low: float
    high: float
    n: int  # measurements behind it
    category: str
    basis: str  # plain words: where the band comes from

    def to_json(self) -> dict[str, Any]:
        return {"low_factor": round(self.low, 4), "high_factor": round(self.high, 4), "measurements": self.n,
                "category": self.category, "basis": self.basis}


@functools.lru_cache(maxsize=1)
def load_accuracy() -> dict[str, Any]:
    """presets/estimator_accuracy.yaml (written by `python bench/memory_accuracy.py --write-bands`)."""
    try:
        data = yaml.safe_load(ACCURACY_FILE.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise EngineError(key="error.estimator.accuracy_unreadable", file=ACCURACY_FILE.name, detail=str(exc.strerror)) from None
    except yaml.YAMLError as exc:
        raise EngineError(key="error.estimator.accuracy_yaml", file=ACCURACY_FILE.name, detail=str(exc)) from None
    if not isinstance(data.get("categories"), dict):
        raise EngineError(key="error.estimator.accuracy_categories", file=ACCURACY_FILE.name)
    return data


def category_of(task: str) -> str:
    """The accuracy category of a MemoryQuery task."""
    return _TASK_CATEGORY.get(task, "full")


def _factor(err: float) -> float:
    # measured = pred / (1 + err); errors below -90% would make the band meaningless
    return 1.0 / (1.0 + max(err, -0.9))


# Fewest measurements (and publishers) behind a with/without-checkpointing band before it replaces its category's. One
# publisher is accepted: its rows are still scored leave-one-source-out (fitted without them); the panel names the count.
MIN_SUBSET_ROWS = 5
MIN_SUBSET_SOURCES = 1


def subset_name(category: str, grad_ckpt: bool, multi_gpu: bool = False) -> str:
    """The key of a category's subset in the accuracy file: with/without gradient checkpointing, one GPU or several."""
    return f"{category}/{'ckpt' if grad_ckpt else 'no-ckpt'}" + ("/multi-gpu" if multi_gpu else "")


def band_for(task: str, model: str, data: dict[str, Any] | None = None, grad_ckpt: bool | None = None, multi_gpu: bool = False) -> Band:
    """The 80% band of an estimate of `task` on `model` from the LOSO errors of its category, widened by the error
    on the nearest measured configuration (the same model and job) when the data has one.

    With `grad_ckpt` given, the errors of the jobs trained the same way (with or without gradient checkpointing) are
    used when at least MIN_SUBSET_ROWS measurements from MIN_SUBSET_SOURCES publishers back them: the two differ in
    what is uncertain (without checkpointing the activations, whose fitted coefficient is the estimate's least sure
    part, dominate; with it the exactly counted weights, adapters and optimizer state do). Jobs on several GPUs (ddp/fsdp,
    `multi_gpu`) have subsets of their own: the allocator reserves differently there (FSDP's gathers run on their own
    stream)."""
    data = load_accuracy() if data is None else data
    cat = category_of(task)
    stats = data["categories"].get(cat) or {}
    label = cat
    if grad_ckpt is not None:
        sub = (data.get("subsets") or {}).get(subset_name(cat, grad_ckpt, multi_gpu)) or {}
        if int(sub.get("n", 0)) >= MIN_SUBSET_ROWS and int(sub.get("sources", 0)) >= MIN_SUBSET_SOURCES:
            where = ", several GPUs" if multi_gpu else ""
            stats, label = sub, f"{cat} ({'with' if grad_ckpt else 'without'} gradient checkpointing{where})"
    n = int(stats.get("n", 0))
    if n == 0:
        return Band(1.0, 1.0, 0, cat, f"no published {cat} measurement to validate against")
    q10, q90 = float(stats["q10"]), float(stats["q90"])
    basis = f"leave-one-source-out error of {n} published {label} measurements (10th-90th percentile)"
    near = [r for r in data.get("rows", []) if r.get("category") == cat and _same_model(r.get("model", ""), model)
            and (label == cat or ((r.get("grad_ckpt") is None or bool(r.get("grad_ckpt")) == grad_ckpt)
                                  and bool(r.get("multi_gpu", False)) == multi_gpu))]
    if near:
        errs = [float(r["loso_err"]) for r in near]
        q10, q90 = min(q10, *errs), max(q90, *errs)
        basis += f"; widened by {len(near)} measurement(s) of this model"
    low, high = _factor(max(q90, 0.0)), _factor(min(q10, 0.0))
    return Band(low, high, n, cat, basis)


def _same_model(a: str, b: str) -> bool:
    def norm(s: str) -> str:
        return s.lower().rsplit("/", 1)[-1].replace("_", "-").replace(".", "-").removesuffix("-hf").removesuffix("-instruct")
    return bool(a) and bool(b) and norm(a) == norm(b)

