"""The fine-tuned example shipped with the app (presets/models/compact-mini-dates): small, recorded, with its card,
listed in the playground, and still as good at the date task as its record says."""

from __future__ import annotations

import json

import pytest

from engine.export.example import example_accuracy
from engine.models.references import SHIPPED_MODELS_DIR, shipped_examples

EXAMPLE = SHIPPED_MODELS_DIR / "compact-mini-dates"


def test_the_example_is_small_recorded_and_carded():
    record = json.loads((EXAMPLE / "recorded.json").read_text())
    assert record["base_model"] == "builtin:compact-mini" and record["dataset"] == "builtin:dates"
    assert record["made_by"].startswith("python -m engine train --method full --base-model builtin:compact-mini --dataset builtin:dates")
    assert record["stored_precision"] == "fp16" and record["date_task_accuracy_in_run"]["before"] == 0.0
    assert (EXAMPLE / "model.safetensors").stat().st_size < 5 * 2**20  # as small as the built-in model it was trained from
    card = (EXAMPLE / "README.md").read_text()
    assert "compact-mini" in card and "/tmp" not in card and "/work" not in card
    assert "compact-mini-dates" in shipped_examples() and "compact-mini" not in shipped_examples()  # a base is not an example


@pytest.mark.slow
def test_the_shipped_copy_still_answers_dates_as_recorded():
    record = json.loads((EXAMPLE / "recorded.json").read_text())
    accuracy, n = example_accuracy(EXAMPLE)
    assert n == record["date_task_questions"] and accuracy == pytest.approx(record["date_task_accuracy"], abs=0.02)
