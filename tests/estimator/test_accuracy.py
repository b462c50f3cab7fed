"""How sure the estimator is: the coefficient fit, leave-one-source-out on a small synthetic CSV, the committed bands,
the band of an estimate and the tight verdict."""

from __future__ import annotations

import csv
import dataclasses
import io
import math

import pytest

from engine.config import MemoryQuery
from engine.estimator import accuracy, memory
from engine.estimator.accuracy import Band, Coefficient, band_for, error_summary, fit_coefficients, leave_one_source_out
from engine.estimator.catalog import tier_by_name

# Three publishers measuring y = k * x; sources A and B agree on k = 2, source C's harness measures k = 3.
SYNTHETIC_CSV = """source,x,measured
A,1,2.0
A,2,4.0
B,3,6.0
B,5,10.0
C,1,3.0
C,4,12.0
"""
SPEC = {"k": Coefficient(tuple(x / 4 for x in range(1, 17)), 1.0, "slope")}


def rows() -> list[dict]:
    return [{"source": r["source"], "x": float(r["x"]), "measured": float(r["measured"])} for r in csv.DictReader(io.StringIO(SYNTHETIC_CSV))]


def predict(row: dict, coefs: dict[str, float]) -> float:
    return coefs["k"] * row["x"]


def fit(train: list[dict]) -> dict[str, float]:
    return fit_coefficients(train, predict, {"k": 1.0}, SPEC)


def test_fit_finds_the_slope_and_keeps_the_prior_without_evidence():
    data = rows()
    assert fit([r for r in data if r["source"] != "C"])["k"] == 2.0
    assert fit([])["k"] == 1.0  # no rows: the start (prior) value stays


def test_leave_one_source_out_scores_each_source_with_the_others_fit():
    data = rows()
    errs = leave_one_source_out(data, fit, predict)
    # A left out: fitted on B (k=2) and C (k=3) only
    k_without_a = fit([r for r in data if r["source"] != "A"])["k"]
    assert errs[0] == pytest.approx((k_without_a * 1 - 2.0) / 2.0)
    # C left out: fitted on A and B (k = 2): C's rows are under-predicted by a third
    assert errs[4] == pytest.approx((2 * 1 - 3.0) / 3.0) and errs[5] == pytest.approx((2 * 4 - 12.0) / 12.0)
    # in-sample C would never look worse than left out: LOSO is the honest figure
    k_all = fit(data)["k"]
    assert abs(k_all * 4 - 12.0) / 12.0 <= abs(errs[5])
    assert all(not math.isnan(e) for e in errs)


def test_error_summary_median_p90_and_signed_quantiles():
    s = error_summary([-0.2, -0.1, 0.0, 0.1, 0.3, math.nan])
    assert s["n"] == 5 and s["median_abs"] == pytest.approx(0.1) and s["q10"] == pytest.approx(-0.16) and s["q90"] == pytest.approx(0.22)
    assert error_summary([]) == {"n": 0}


DATA = {"categories": {"QLoRA": {"n": 10, "median_abs": 0.05, "p90_abs": 0.1, "q10": -0.1, "q90": 0.05}, "full": {"n": 0}},
        "rows": [{"model": "meta-llama/Llama-2-7b-hf", "category": "QLoRA", "loso_err": -0.25}]}


def test_band_from_the_category_and_the_nearest_measured_model():
    b = band_for("qlora", "mistral-7b-v0.1", DATA)
    assert b.n == 10 and b.low == pytest.approx(1 / 1.05) and b.high == pytest.approx(1 / 0.9)
    near = band_for("qlora", "llama-2-7b", DATA)  # a measurement of this model was 25% under: the band widens
    assert near.high == pytest.approx(1 / 0.75) and "this model" in near.basis
    assert band_for("full", "x", DATA).n == 0 and band_for("full", "x", DATA).high == 1.0


def test_committed_bands_meet_the_target_and_say_how_many_measurements():
    data = accuracy.load_accuracy()
    for cat in accuracy.CATEGORIES:
        stats = data["categories"][cat]
        assert stats["n"] >= 2 and stats["median_abs"] <= 0.10, (cat, stats)
        assert stats["q10"] <= stats["q90"]
    assert set(data["fitted_on_all_sources"]) == set(accuracy.FITTED)
    for name, value in data["fitted_on_all_sources"].items():  # the committed coefficients are the fit on every source
        assert memory.CAL[name] == pytest.approx(value), name


def test_every_estimate_carries_its_band_in_json():
    est = memory.estimate(MemoryQuery(model="llama-2-7b", task="qlora", seq_len=512))
    band = est.to_json()["band"]
    assert band["measurements"] >= 2 and band["category"] == "QLoRA"
    lo, hi = band["allocated_gib"]
    assert lo <= est.allocated_gib <= hi and lo < hi


def test_tight_when_the_band_straddles_the_usable_memory():
    q = MemoryQuery(model="llama-2-7b", task="qlora", seq_len=512)
    est = memory.estimate(q)
    base = tier_by_name("t4-16gb")
    need, paged = memory.need_gib(q, base)
    band = est.band
    var = need - base.cuda_context_gib

    def card(usable: float):
        return dataclasses.replace(base, usable_gib=usable)

    above_band = base.cuda_context_gib + var * band.high + paged + 0.01
    inside_band = base.cuda_context_gib + var * (1 + band.high) / 2
    below_band = base.cuda_context_gib + var * band.low - 0.01
    assert memory.tier_verdict(q, card(above_band)) == "fits"
    assert memory.tier_verdict(q, card(inside_band)) == "tight"
    assert memory.tier_verdict(q, card(below_band)) == "no"


def test_a_band_with_no_measurements_changes_nothing():
    assert Band(1.0, 1.0, 0, "full", "").to_json()["measurements"] == 0
