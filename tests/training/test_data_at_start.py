"""Start checks the data first (issue 32): data that the data check refuses (an empty file, columns that match no format, a
preference method without pairs, GRPO on plain text) is refused by Start before any run folder exists, from the page and
the MCP tool (JobManager.start) and from `python -m engine train`, with the data check's message in the visitor's
language (beside the data field on the page)."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.config import TrainConfig
from engine.errors import DataError
from engine.training.data_check import inspect_dataset
from engine.training.jobs import JobManager
from engine.views import assistant, finetune_form


def _bad_data(tmp_path):
    """(id, dataset, method, what the message says) for each kind of data Start refuses."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    csv = tmp_path / "columns.csv"
    csv.write_text("foo,bar\n1,2\n3,4\n")
    return [("empty file", str(empty), "full", "empty"), ("no format", str(csv), "full", "foo"),
            ("dpo without pairs", "builtin:dates", "dpo", "dpo"), ("grpo on plain text", "builtin:corpus", "grpo", "corpus")]


CASES = ["empty file", "no format", "dpo without pairs", "grpo on plain text"]


def _case(tmp_path, which):
    return next(c for c in _bad_data(tmp_path) if c[0] == which)


@pytest.mark.parametrize("which", CASES)
def test_the_data_check_and_start_refuse_the_same_data(which, tmp_path):
    _, dataset, method, fragment = _case(tmp_path, which)
    cfg = TrainConfig(dataset=dataset, method=method, base_model="builtin:compact-mini", run_name="bad")
    with pytest.raises(DataError) as checked:
        inspect_dataset(cfg, tmp_path / "runs")  # the "Check the data" button
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    jobs = JobManager(runs)
    with pytest.raises(DataError) as started:
        jobs.start(cfg)
    assert started.value.key == checked.value.key and fragment in str(started.value).lower()
    assert not any(p for p in runs.iterdir() if p.name != "_uploads") and jobs.active() is None


@pytest.mark.parametrize("which", CASES)
def test_the_cli_refuses_bad_data_before_the_run_folder(which, tmp_path, monkeypatch, capsys):
    _, dataset, method, fragment = _case(tmp_path, which)
    runs = tmp_path / "runs"
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs))
    assert main(["train", "--dataset", dataset, "--method", method, "--base-model", "builtin:compact-mini", "--run-name", "bad"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and fragment in err.lower(), err
    assert not runs.exists() or not any(runs.iterdir())


def test_the_mcp_tool_refuses_dpo_on_data_without_pairs(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    jobs = JobManager(runs)
    start = next(fn for fn in assistant.tools(jobs) if fn.__name__ == "start_training")
    with pytest.raises(DataError, match="dpo"):
        start(method="dpo", dataset="builtin:dates", max_steps=1)
    assert not any(runs.iterdir())
    # the same tool with the pairs it needs is not refused by the data check (the process itself is not launched here)
    monkeypatch.setattr(JobManager, "_launch", lambda self, run_dir, *, resume: None)
    ok = start(method="dpo", dataset="builtin:preferences", max_steps=1)
    assert (runs / json.loads(ok)["run"] / "config.yaml").is_file()


@pytest.mark.parametrize(("lang", "words"), [("en", "did not start"), ("pt-BR", "não iniciou")])
def test_the_refusal_beside_the_data_field_is_in_the_visitors_language(lang, words, tmp_path):
    _, dataset, method, fragment = _case(tmp_path, "no format")
    line = finetune_form.data_refusal(lambda: TrainConfig(dataset=dataset, method=method), lang)
    assert line.startswith("⚠") and words in line and "foo" in line
    assert finetune_form.data_refusal(lambda: TrainConfig(dataset="builtin:dates"), lang) == ""  # good data: nothing beside it


def test_a_hub_dataset_is_left_to_the_run(tmp_path):
    # Start does not download a Hub dataset (offline here): the run reads it and meets the same refusals
    from engine.training.preflight import check_data_before_start

    check_data_before_start(TrainConfig(dataset="hub:someone/some-data"))


@pytest.mark.parametrize("method", ["dpo", "orpo", "kto"])
def test_pairs_of_the_models_mistakes_pass_start_for_the_methods_they_serve(method, tmp_path, monkeypatch):
    """builtin:date-mistakes has no rows before the run (its pairs are made when it starts): Start checks the date prompts
    and the method, and the ORPO default the form fills in starts (it was refused as an unknown dataset)."""
    from engine.training.preflight import check_data_before_start

    cfg = TrainConfig(method=method, dataset="builtin:date-mistakes", tuning="full", micro_batch_size=8)
    check_data_before_start(cfg)
    monkeypatch.setattr(JobManager, "_launch", lambda self, run_dir, *, resume: None)
    name = JobManager(tmp_path).start(cfg)
    assert (tmp_path / name / "config.yaml").is_file()


@pytest.mark.parametrize(("method", "lang", "words"), [("lora", "en", "data for DPO, ORPO or KTO"), ("grpo", "pt-BR", "dados para DPO, ORPO ou KTO")])
def test_pairs_of_the_models_mistakes_are_refused_for_other_methods(method, lang, words, tmp_path):
    from engine.training.preflight import check_data_before_start

    with pytest.raises(DataError) as refused:
        check_data_before_start(TrainConfig(method=method, dataset="builtin:date-mistakes"))
    assert words in refused.value.render(lang) and method in refused.value.render(lang)
