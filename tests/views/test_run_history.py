"""The run history (engine/views/run_history.py): five short columns in the visitor's language, the rest of a run's
facts on select."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from engine.runs import RunSummary
from engine.views.run_history import HISTORY_COLUMNS, ago, history_headers, history_rows, history_table, run_details_md, selected_details

NOW = 1_800_000_000.0


def _run(**kw) -> RunSummary:
    return RunSummary(**{"name": "r1", "path": Path("/runs/r1"), "state": "running", **kw})


DONE = _run(name="done", state="finished", method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", step=10, max_steps=10,
            best_eval_loss=1.234567, duration_s=61.6, predicted_gib=1.5, measured_gib=1.25, task_scores={"before": 0.0, "after": 0.75},
            resumable=True, started=NOW - 12 * 60, device="cpu")
FRESH = _run(name="fresh", state="created")


def test_short_columns_in_both_languages():
    jobs = SimpleNamespace(list_runs=lambda: [DONE, FRESH])
    assert history_headers() == ["run", "method", "status", "started", "eval loss"] and len(HISTORY_COLUMNS) == 5
    assert history_headers("pt-BR") == ["treino", "método", "situação", "início", "loss aval."]
    assert all(len(word) <= 12 for h in history_headers("pt-BR") for word in h.split())  # short words: no header breaks mid-word
    assert history_rows(jobs, now=NOW) == [["done", "lora", "✔ finished", "12 min ago", "1.235"], ["fresh", "—", "… starting", "—", "—"]]
    assert history_rows(jobs, "pt-BR", now=NOW)[0] == ["done", "lora", "✔ concluído", "há 12 min", "1,235"]
    table = history_table(jobs, "pt-BR")
    assert list(table.columns) == history_headers("pt-BR") and len(table) == 2


def test_when_a_run_started():
    assert [ago(NOW - s, now=NOW) for s in (5, 120, 7200, 3 * 86400)] == ["just now", "2 min ago", "2 h ago", "3 d ago"]
    assert ago(NOW - 7200, "pt-BR", now=NOW) == "há 2 h" and ago(None) == "—"


def test_details_of_the_selected_run():
    text = run_details_md(DONE, "pt-BR")
    assert text.startswith("**done** · ✔ concluído")
    assert "- modelo base: `builtin:compact-mini`" in text and "- passos: 10 / 10" in text and "antes 0% → depois 75%" in text
    assert "- duração: 1 min 02 s" in text and "processo inteiro" in text and "- pode ser retomado: sim" in text
    jobs = SimpleNamespace(status=lambda name: DONE)
    assert selected_details(jobs, "done") == run_details_md(DONE) and selected_details(jobs, None) == ""
