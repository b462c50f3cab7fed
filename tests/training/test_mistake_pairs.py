"""On-policy pairs (issue 33): the model's own wrong answers to the date task's training prompts, scored by the task's
checker, become the rejected side of preference pairs; `builtin:date-mistakes` makes them when a DPO run starts, and the
run trains, reports steps, speed and time left once its phase is "training", and is scored on the date task."""

from __future__ import annotations

import pytest

from engine.config import TrainConfig
from engine.data.build import load_source
from engine.inference.mistakes import mistake_pairs, write_pairs
from engine.inference.tasks import date_items, normalize_answer
from engine.runs import read_events
from engine.training.run import run_training


@pytest.fixture(scope="module")
def builtin_model(runs_dir):
    from engine.models.loading import load_model

    return load_model("builtin:compact-mini", runs_dir=runs_dir)


def test_the_pairs_are_the_models_own_wrong_answers(builtin_model, tmp_path):
    items = date_items("train", 4)
    pairs, stats = mistake_pairs(builtin_model.model, builtin_model.tokenizer, items, samples=2, max_new_tokens=8, seed=3)
    assert stats.prompts == 4 and stats.answers == 12 and stats.pairs == len(pairs) > 0  # greedy + 2 samples each
    expected = {i["instruction"]: i["output"] for i in items}
    seen = set()
    for p in pairs:
        assert p["chosen"] == expected[p["prompt"]]  # the expected date is chosen ...
        assert normalize_answer(p["rejected"]) != p["chosen"]  # ... over an answer the date checker marks wrong
        assert (p["prompt"], normalize_answer(p["rejected"])) not in seen  # each distinct mistake once
        seen.add((p["prompt"], normalize_answer(p["rejected"])))
    records = load_source(str(write_pairs(pairs, tmp_path / "mistakes.jsonl")))
    assert records.format == "preference" and len(records.records) == len(pairs)  # any DPO/ORPO/KTO run reads the file


def test_a_dpo_run_on_its_base_models_mistakes(runs_dir, monkeypatch):
    import engine.inference.mistakes as mistakes

    monkeypatch.setattr(mistakes, "N_PROMPTS", 6)  # a few prompts: the built-in model rambles to the token limit
    cfg = TrainConfig(method="dpo", tuning="full", base_model="builtin:compact-mini", dataset="builtin:date-mistakes", run_name="t-dpo-mistakes",
                      max_steps=2, micro_batch_size=4, max_seq_len=72, logging_steps=1, save_steps=2, eval_fraction=0.0, learning_rate=5e-5,
                      sample_generations=False)
    run_dir = runs_dir / cfg.run_name
    done = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert done["type"] == "done" and (run_dir / "model").is_dir()
    events = read_events(run_dir)
    found = next(e for e in events if e["type"] == "mistakes")
    assert found["prompts"] == 6 and found["pairs"] > 0 and (run_dir / "mistakes.jsonl").is_file()
    assert next(e for e in events if e["type"] == "data")["mistakes"]["pairs"] == found["pairs"]
    assert {e["when"] for e in events if e["type"] == "task_score"} == {"before", "after"}  # judged by the date task
    phases = [e["phase"] for e in events if e["type"] == "phase"]
    first_step = next(i for i, e in enumerate(events) if e["type"] == "progress")
    last_phase = [e for e in events[:first_step] if e["type"] == "phase"][-1]
    assert last_phase["phase"] == "training"  # the view shows steps, speed and time left from here on
    assert phases.index("making pairs from the starting model's mistakes on the date task") < phases.index("training")
    assert any(p.startswith("DPO reference") for p in phases)
    progress = [e for e in events if e["type"] == "progress"]
    assert progress[0]["tokens_per_s"] > 0 and progress[0]["eta_s"] is not None and progress[-1]["step"] == 2


def test_few_pairs_are_read_at_most_four_times(runs_dir, monkeypatch):
    """A base that makes few mistakes makes few pairs: the run trains at most MAX_PASSES passes over them instead of the
    form's steps (many passes over ~20 pairs lowered the date task, docs/preference.md) and says so in its log."""
    import engine.inference.mistakes as mistakes
    from engine.training.mistake_data import MAX_PASSES, capped_steps
    from engine.views.run_log import event_line

    assert capped_steps(TrainConfig(method="orpo", max_steps=250, micro_batch_size=8), 20) == 10
    assert capped_steps(TrainConfig(method="kto", max_steps=250, micro_batch_size=8), 20) == 20  # a pair is two KTO rows
    assert capped_steps(TrainConfig(method="orpo", max_steps=250, micro_batch_size=8), 570) is None  # the measured defaults stay
    assert capped_steps(TrainConfig(method="orpo", max_steps=0, micro_batch_size=8), 20) is None  # a run by epochs
    monkeypatch.setattr(mistakes, "N_PROMPTS", 2)
    cfg = TrainConfig(method="orpo", tuning="full", base_model="builtin:compact-mini", dataset="builtin:date-mistakes", run_name="t-few-pairs",
                      max_steps=200, micro_batch_size=4, max_seq_len=72, logging_steps=1, save_steps=500, eval_fraction=0.0, learning_rate=5e-5,
                      sample_generations=False)
    run_dir = runs_dir / cfg.run_name
    done = run_training(cfg, run_dir, runs_dir=runs_dir)
    events = read_events(run_dir)
    pairs = next(e for e in events if e["type"] == "mistakes")["pairs"]
    capped = next(e for e in events if e["type"] == "mistakes_steps")
    assert capped == {**capped, "pairs": pairs, "steps": -(-MAX_PASSES * pairs // 4), "asked": 200, "passes": MAX_PASSES}
    assert done["type"] == "done" and done["steps"] == capped["steps"]
    assert [e for e in events if e["type"] == "progress"][-1]["max_steps"] == capped["steps"]
    assert f"{pairs} pares" in event_line(capped, "pt-BR") and "instead of 200" in event_line(capped, "en")
