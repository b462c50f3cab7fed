"""Benchmarks with lm-evaluation-harness, without a subprocess: the curated list names tasks the pinned harness really has
(Portuguese ones included), a bad task name is refused naming the field and listing the allowed ones, the date task written in
the harness's own task format, a model too big for the card refused before anything is written, the message when the optional
package is missing, and the CLI scoring the built-in model offline (results per task, a second run skipping them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from engine import i18n
from engine.benchmarks import bench_tasks, check_task_names
from engine.config import BenchConfig
from engine.errors import ConfigError, EngineError
from engine.hardware.device import DeviceInfo
from engine.inference.harness import INSTALL_COMMAND, harness_missing, plan_bench, read_results, require_harness, write_local_tasks

T4 = DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5))


def _harness_task_names() -> set[str]:
    """Every task and group name in the installed harness's task files (read as text: importing the harness is not needed)."""
    import importlib.util

    spec = importlib.util.find_spec("lm_eval")
    names = set()
    for path in Path(spec.origin).parent.joinpath("tasks").rglob("*.yaml"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(("task: ", "group: ")):
                names.add(line.split(":", 1)[1].strip().strip("'\""))
    return names


def test_the_curated_list_names_tasks_of_the_pinned_harness_portuguese_included():
    pytest.importorskip("lm_eval", reason="requirements-eval.txt")
    tasks = bench_tasks()
    known = _harness_task_names()
    standard = [t for t in tasks.values() if not t.local]
    assert {t.name for t in standard} <= known, sorted({t.name for t in standard} - known)
    portuguese = [t.name for t in standard if t.language == "pt"]
    assert len(portuguese) >= 5 and "belebele_por_Latn" in portuguese and "global_mmlu_pt" in portuguese
    assert all(t.size > 0 and 0 < t.limit <= t.size and t.kind for t in tasks.values())
    for task in tasks.values():  # every task says what it measures, in both languages
        assert all(i18n.t(f"bench.kind.{task.kind}", lang) != f"bench.kind.{task.kind}" for lang in i18n.LANGS)


def test_a_bad_task_name_names_the_field_and_lists_the_allowed():
    with pytest.raises(ConfigError) as err:
        BenchConfig(tasks="dates_mc, belebele_pt")
    assert err.value.field == "tasks" and "belebele_pt" in str(err.value)
    assert "dates_mc" in str(err.value) and "belebele_por_Latn" in str(err.value)
    assert "nomes de tarefas" in err.value.render("pt-BR")
    with pytest.raises(ConfigError):
        check_task_names(" , ")
    assert BenchConfig(tasks="dates_mc dates_iso").tasks == "dates_mc dates_iso"


def test_the_date_task_in_the_harness_format(tmp_path):
    pytest.importorskip("lm_eval", reason="requirements-eval.txt")
    folder = write_local_tasks(tmp_path / "tasks")
    mc = yaml.safe_load((folder / "dates_mc.yaml").read_text(encoding="utf-8"))
    assert mc["dataset_path"] == "json" and mc["output_type"] == "multiple_choice"
    assert Path(mc["dataset_kwargs"]["data_files"]["test"]).is_file()
    rows = [json.loads(line) for line in (folder / "dates_mc.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 100 and all(len(set(r["choices"])) == 4 for r in rows)
    from engine.inference.tasks import date_items

    assert [r["choices"][r["answer"]].replace("/", "-") for r in rows] == [item["output"] for item in date_items("test")]
    # what the harness reads: plain strings (an ISO date in JSON would become a timestamp), the ISO dates as its templates render them
    import datasets
    from lm_eval.tasks import TaskManager

    docs = datasets.load_dataset("json", data_files={"test": str(folder / "dates_iso.jsonl")})["test"]
    assert docs.features["answer"].dtype == "string"
    task = TaskManager(include_path=str(folder), include_defaults=False).load_task_or_group(["dates_mc", "dates_iso"])
    mc_task, gen_task = task["dates_mc"], task["dates_iso"]
    first = next(iter(mc_task.test_docs()))
    assert mc_task.doc_to_choice(first)[mc_task.doc_to_target(first)] == date_items("test")[0]["output"]
    assert gen_task.doc_to_target(next(iter(gen_task.test_docs()))) == date_items("test")[0]["output"]
    gen = yaml.safe_load((folder / "dates_iso.yaml").read_text(encoding="utf-8"))
    assert gen["output_type"] == "generate_until" and gen["metric_list"][0]["metric"] == "exact_match"
    assert (folder / "dates_mc.jsonl").read_bytes() == write_local_tasks(tmp_path / "again").joinpath("dates_mc.jsonl").read_bytes()


def test_a_model_that_does_not_fit_is_refused_naming_the_estimate_and_the_card(tmp_path):
    with pytest.raises(EngineError) as err:
        plan_bench(BenchConfig(model="Qwen/Qwen2.5-72B-Instruct"), tmp_path, T4)
    text = str(err.value)
    assert "Tesla T4" in text and "14.6 GiB" in text and "GiB" in text.split("needs about")[1] and "4bit" in text
    assert "Tesla T4" in err.value.render("pt-BR") and "precisa de cerca de" in err.value.render("pt-BR")
    # a 7B model is scored on a T4 in 8-bit (16-bit does not fit), and as asked when asked
    assert plan_bench(BenchConfig(model="Qwen/Qwen2.5-7B-Instruct"), tmp_path, T4).mode == "8bit"
    assert plan_bench(BenchConfig(model="Qwen/Qwen2.5-7B-Instruct", quant="4bit"), tmp_path, T4).mode == "4bit"
    assert plan_bench(BenchConfig(model="builtin:compact-mini"), tmp_path, T4).mode == "none"


def test_the_missing_package_is_named_with_its_install_command(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # not importable, as without requirements-eval.txt
    assert harness_missing()
    with pytest.raises(EngineError) as err:
        require_harness()
    assert INSTALL_COMMAND in str(err.value) and INSTALL_COMMAND in err.value.render("pt-BR")
    import gradio as gr

    from ui.playground_bench import bench_tab, notes

    assert INSTALL_COMMAND in notes("en") and "Instale com" in notes("pt-BR")
    with gr.Blocks():  # the tab says it before the click: the note with the command, Start switched off
        tab = bench_tab(["builtin:compact-mini"], "builtin:compact-mini")
    assert INSTALL_COMMAND in tab.note.value and tab.start.interactive is False
    from engine.cli import main

    assert main(["bench", "--tasks", "dates_mc"]) == 2
    assert "pip install -r requirements-eval.txt" in capsys.readouterr().err


def test_the_cli_scores_the_built_in_model_offline_and_a_second_run_skips_what_is_done(runs_dir, monkeypatch, capsys):
    pytest.importorskip("lm_eval", reason="requirements-eval.txt")
    from engine.cli import main

    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs_dir))
    assert main(["bench", "--model", "builtin:compact-mini", "--tasks", "dates_mc", "--limit", "3", "--batch-size", "4"]) == 0
    assert "dates_mc" in capsys.readouterr().out
    folder = runs_dir / "_benchmarks" / "builtin-compact-mini-none"
    result = read_results(folder)["dates_mc"]
    assert result["n"] == 3 and result["metric"] == "acc" and 0 <= result["value"] <= 1 and result["stderr"] is not None
    assert main(["bench", "--model", "builtin:compact-mini", "--tasks", "dates_mc", "--limit", "3"]) == 0
    events = [json.loads(line) for line in (folder / "bench_events.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [e["type"] for e in events][-2:] == ["bench_skip", "bench_done"] and "bench_load" not in [e["type"] for e in events[-3:]]
    assert read_results(folder)["dates_mc"]["time"] == result["time"]  # kept, not scored again
    assert not (folder / "bench.pid").exists()  # this process lives on: it no longer holds the machine
