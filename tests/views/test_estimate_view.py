"""The estimator panel's results without gradio, and the fine-tune values it hands over."""

from __future__ import annotations

import pytest

from engine.config import MemoryQuery
from engine.errors import ConfigError, EngineError
from engine.views.estimate_view import estimate_or_warning, estimate_outputs, finetune_values


def test_estimate_outputs_for_a_builtin_model():
    q = MemoryQuery(model="builtin:compact-mini", task="full", batch=2, grad_accum=3)
    md, chart, rows, tiers, limits, fit = estimate_outputs(q, "t4-16gb")
    assert "GiB allocated by PyTorch" in md and "effective batch 6" in md
    assert set(chart.columns) == {"job", "term", "GiB"} and (chart["GiB"] > 0).all() and set(chart["job"]) == {"full"}
    assert any("weights" in str(r[0]).lower() for r in rows)
    assert all(r[2] in ("fits", "tight", "does not fit", "?") for r in tiers)
    assert limits.startswith("On **t4-16gb**: largest batch that fits") and isinstance(fit, list)


def test_an_unknown_card_is_a_limits_message_and_an_unknown_model_raises():
    _, _, _, _, limits, fit = estimate_outputs(MemoryQuery(model="builtin:compact-mini"), "no-such-card")
    assert limits.startswith("⚠") and fit == []
    with pytest.raises(EngineError):
        estimate_outputs(MemoryQuery(model="no-such/model-xyz"), "t4-16gb")


def test_finetune_values_without_and_with_a_suggestion():
    q = MemoryQuery(model="builtin:compact-mini", task="lora", batch=4, seq_len=128)
    values, rank = finetune_values(q, "t4-16gb", None)
    assert rank is None and values["micro_batch_size"] == 4 and values["max_seq_len"] == 128
    values, rank = finetune_values(q, "t4-16gb", 999)  # no such suggestion: the query as it is
    assert rank is None and values["micro_batch_size"] == 4


def test_estimate_or_warning_shows_an_engine_error_in_place_of_the_totals():
    q = MemoryQuery(model="builtin:compact-mini")
    assert estimate_or_warning(lambda: q, "t4-16gb")[0] == estimate_outputs(q, "t4-16gb")[0]

    def bad():
        raise ConfigError("batch", 0, "at least 1")

    assert estimate_or_warning(bad, "t4-16gb") == ("**⚠ batch = 0 is not allowed: at least 1.**", None, None, None, "", None, "", None)
    assert estimate_or_warning(lambda: MemoryQuery(model="no-such/model-xyz"), "t4-16gb")[0].startswith("**⚠ ")


def test_totals_carry_the_band_and_the_breakdown_the_named_components():
    q = MemoryQuery(model="llama-2-7b", task="qlora", seq_len=512, grad_ckpt=True)
    md, chart, rows, _tiers, _limits, _fit = estimate_outputs(q, "t4-16gb")
    assert "80% band" in md and "published QLoRA measurements" in md
    named = [r for r in rows if str(r[0]).startswith("↳")]
    assert any("dequantized 4-bit weight" in r[0] for r in named) and any("fp32 upcast" in r[0] for r in named)
    assert not any(str(t).startswith("↳") for t in chart["term"])  # the chart stacks the terms only
