"""The "Mix adapters" view without gradio: the runs a visitor may mix (only their own on a shared app), the form's values as
a MixConfig, and a mixed run's scores beside its parents' (the date task, benchmarks read from the run folders, extra columns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.errors import ConfigError
from engine.runs import EventLog
from engine.training.jobs import JobManager
from engine.views import mix_view


def _run(runs: Path, name: str, *, output: str = "adapter", owner: str | None = None, after: float | None = None) -> Path:
    run = runs / name
    (run / "adapter").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "lora", "base_model": "builtin:compact-mini", "dataset": "builtin:dates"}))
    ev = EventLog(run / "events.jsonl")
    ev.write("start", run=name)
    if after is not None:
        ev.write("task_score", when="after", accuracy=after, n=100)
    ev.write("done", output=output)
    if owner:
        JobManager(runs).record_owner(run, owner)
    return run


def _mix_run(runs: Path, name: str, parents: str, weights: str = "") -> Path:
    run = _run(runs, name)
    (run / "mix.yaml").write_text(yaml.safe_dump({"parents": parents, "combination": "ties", "weights": weights, "density": 0.5}))
    return run


def test_a_visitor_may_mix_only_their_own_finished_lora_runs(tmp_path):
    _run(tmp_path, "mine-a", owner="me")
    _run(tmp_path, "mine-b", owner="me")
    _run(tmp_path, "theirs", owner="them")
    _run(tmp_path, "full", output="model", owner="me")
    shared = JobManager(tmp_path, owner_only=True)
    assert sorted(mix_view.mixable_runs(shared, "me")) == ["mine-a", "mine-b"]
    assert sorted(mix_view.mixable_runs(JobManager(tmp_path, owner_only=False), None)) == ["mine-a", "mine-b", "theirs"]


def test_the_form_values_become_a_mix_config():
    cfg = mix_view.mix_config(["a", "b"], "dare_ties", [1.0, 0.5, 1.0, 1.0], 0.3, 0, True, " m ")
    assert (cfg.parents, cfg.weights, cfg.density, cfg.run_name) == ("a,b", "1,0.5", 0.3, "m")
    assert mix_view.mix_config(["a", "b", "c"], "ties", [1, 1, 1, 1], 0.5, 0, True, "").weight_list == [1.0, 1.0, 1.0]
    with pytest.raises(ConfigError) as info:
        mix_view.mix_config(["a"], "ties", [1, 1, 1, 1], 0.5, 0, True, "")
    assert "Treinos a misturar (parents)" in info.value.render("pt-BR")


def test_a_mix_sits_beside_its_parents_with_the_date_task_and_the_benchmarks(tmp_path):
    jobs = JobManager(tmp_path)
    _run(tmp_path, "dates", after=0.8)
    _run(tmp_path, "instr", after=None)
    mix = _mix_run(tmp_path, "mixed", "dates,instr", weights="1,0.5")
    ev = EventLog(mix / "events.jsonl")
    ev.write("mix", rank=8)
    ev.write("task_score", when="before", accuracy=0.0, n=100)
    ev.write("mix_score", run="instr", accuracy=0.02)
    ev.write("mix_score", run="mixed", accuracy=0.61)
    (tmp_path / "dates" / "benchmarks").mkdir()
    (tmp_path / "dates" / "benchmarks" / "arc.json").write_text(json.dumps({"results": {"arc_easy": {"acc,none": 0.25, "acc_stderr,none": 0.01}}}))
    (mix / "benchmarks").mkdir()
    (mix / "benchmarks" / "flat.json").write_text(json.dumps({"arc_easy": 0.3}))
    headers, rows = mix_view.side_by_side(jobs, "mixed", "en", extra={"instr": {"enem": 0.125}})
    assert headers == ["Model", "Role", "Date task", "arc_easy", "enem"]
    assert rows == [
        ["base", "base", "0 %", "not scored yet", "not scored yet"],
        ["dates", "parent (weight 1)", "80 %", "25 %", "not scored yet"],  # its own score after training
        ["instr", "parent (weight 0.5)", "2 %", "not scored yet", "12.5 %"],
        ["mixed", "mix", "61 %", "30 %", "not scored yet"],
    ]
    headers_pt, rows_pt = mix_view.side_by_side(jobs, "mixed", "pt-BR")
    assert headers_pt[:3] == ["Modelo", "Papel", "Tarefa de datas"] and rows_pt[2][1] == "origem (peso 0,5)" and rows_pt[3][2] == "61 %"
    assert "mixes dates + instr with **ties**, density 0.5, rank 8" in mix_view.mix_note(jobs, "mixed", "en")
    assert mix_view.side_by_side(jobs, "dates", "en") == ([], [])  # not a mix
    assert mix_view.mix_note(jobs, "dates", "pt-BR").startswith("Escolha um treino misturado")


def test_a_mix_is_never_resumed_as_a_training_run(tmp_path):
    from engine.errors import JobError
    from engine.runs import summarize
    from engine.views.run_control import resume_run

    mix = _mix_run(tmp_path, "failed-mix", "a,b")
    (mix / "events.jsonl").write_text(json.dumps({"type": "start", "time": 1.0}) + "\n" + json.dumps({"type": "error", "time": 2.0, "message": "x"}) + "\n")
    s = summarize(mix, alive=False)
    assert s.state == "failed" and not s.restartable and not s.resumable and s.dataset == "mix of a + b (ties)"
    with pytest.raises(JobError) as info:
        resume_run(JobManager(tmp_path), "failed-mix", None)
    assert "mix its runs again" in info.value.render("en") and "misture de novo" in info.value.render("pt-BR")


def test_the_benchmarks_tab_results_of_parents_and_mix_sit_side_by_side(tmp_path):
    """What the Benchmarks tab wrote (engine/inference/harness.py: <run>/benchmarks/results/<task>.json) is a column here."""
    from engine.inference.harness import result_path

    jobs = JobManager(tmp_path)
    _run(tmp_path, "dates", after=0.8)
    _run(tmp_path, "instr", after=None)
    mix = _mix_run(tmp_path, "mixed", "dates,instr", weights="1,1")
    EventLog(mix / "events.jsonl").write("mix_score", run="mixed", accuracy=0.5)
    for run, value in (("dates", 0.9), ("mixed", 0.7)):
        path = result_path(tmp_path / run / "benchmarks", "dates_mc")
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"task": "dates_mc", "metric": "acc", "value": value, "stderr": 0.03, "n": 100}))
    headers, rows = mix_view.side_by_side(jobs, "mixed", "en")
    assert headers[-1] == "dates_mc"
    by_model = {row[0]: row[-1] for row in rows}
    assert by_model["dates"] == "90 %" and by_model["mixed"] == "70 %" and by_model["instr"] == "not scored yet"
