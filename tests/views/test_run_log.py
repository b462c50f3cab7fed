"""The run's log for people (engine/views/run_log.py): one line per event, numbers for people, the known phases in
Portuguese, server folders hidden."""

from __future__ import annotations

import pytest

from engine.views.run_log import event_line, fmt_duration, fmt_loss, fmt_plain, log_text, phase_text

PROGRESS = {"type": "progress", "step": 120, "max_steps": 1000, "loss": 1.23449, "lr": 0.0008000000000000001, "tokens_per_s": 1234.4,
            "mem_gib": 0.52}


def test_a_progress_line_in_both_languages():
    assert event_line(PROGRESS) == "step 120/1,000 · loss 1.234 · lr 0.0008 · 1,234 tokens/s · 0.52 GiB"
    assert event_line(PROGRESS, "pt-BR") == "passo 120/1.000 · loss 1,234 · lr 0,0008 · 1.234 tokens/s · 0,52 GiB"
    # a pretraining step (the built-in base, mirrored into the run's events) and missing values left out
    assert event_line({"type": "base_progress", "step": 5, "max_steps": 400, "loss": 7.0}) == "pretraining step 5/400 · loss 7.000"


@pytest.mark.parametrize("value, en, pt", [(8e-4, "0.0008", "0,0008"), (2.5e-5, "0.000025", "0,000025"), (1e-3, "0.001", "0,001"),
                                           (0.0009000000000000001, "0.0009", "0,0009"), (1.5, "1.5", "1,5"), (150, "150", "150"), (0, "0", "0")])
def test_small_numbers_never_in_scientific_notation(value, en, pt):
    assert fmt_plain(value) == en and fmt_plain(value, "pt-BR") == pt


def test_durations_and_losses():
    assert [fmt_duration(s) for s in (45, 125, 3725, None)] == ["45 s", "2 min 05 s", "1 h 02 min", ""]
    # past 48 hours, days (issue 32: a 10,000,000-step run read "2928 h 53 min")
    assert [fmt_duration(s) for s in (47 * 3600 + 59 * 60, 48 * 3600, 2928 * 3600 + 53 * 60)] == ["47 h 59 min", "2 d 00 h", "122 d 00 h"]
    assert fmt_loss(2.0) == "2.000" and fmt_loss(1234.5678, "pt-BR") == "1.234,568" and fmt_loss(None) == "—"


def test_known_phases_are_translated_others_shown_as_written():
    assert phase_text("training", "pt-BR") == "treinando"
    assert phase_text("loading builtin:compact-mini", "pt-BR") == "carregando builtin:compact-mini"
    assert phase_text("loading the teacher gpt2", "pt-BR") == "carregando o professor gpt2"
    assert phase_text("scoring the date task (after)", "pt-BR") == "medindo a tarefa das datas (depois)"
    assert "compact-mini" in phase_text("pretraining the built-in model 'compact-mini' on the built-in corpus (first use only)", "pt-BR")
    assert phase_text("loss 0.0500 reached the stop-at-loss threshold 0.05: finishing", "pt-BR") == \
        "a loss 0,05 chegou ao limite de parada 0,05: finalizando"
    assert phase_text("something new", "pt-BR") == "something new"


def test_the_log_renders_each_event_and_hides_server_folders():
    events = [
        {"type": "start", "device": "AMD EPYC", "dtype": "float32", "resumed_from": None},
        {"type": "phase", "phase": "loading /srv/models/mine"},
        {"type": "memory", "predicted_gib": 0.1},
        {"type": "data", "train_examples": 540, "eval_examples": 60, "dropped": 0},
        PROGRESS,
        {"type": "samples", "step": 200, "samples": []},  # nothing for a person here
        {"type": "eval", "step": 200, "eval_loss": 0.9, "perplexity": 2.46},
        {"type": "task_score", "when": "after", "accuracy": 0.75, "n": 100},
        {"type": "done", "steps": 1000, "duration_s": 77.2, "final_loss": 0.5, "last_loss": 0.007, "output": "model", "path": "/srv/runs/r/model"},
    ]
    text = log_text(events, scrub=lambda s: s.replace("/srv/models", "~"))
    assert text.splitlines() == [
        "▶ started on AMD EPYC (float32)",
        "· loading ~/mine",
        "memory predicted for the model: 0.10 GiB",
        "data: 540 training examples, 60 for eval (0 rows dropped)",
        "step 120/1,000 · loss 1.234 · lr 0.0008 · 1,234 tokens/s · 0.52 GiB",
        "eval at step 200: loss 0.900 (perplexity 2.46)",
        "◎ date task (after): 75% right (75/100)",
        "✔ finished: 1,000 steps in 1 min 17 s · loss at the last step 0.007 (mean over the run 0.500) · saved model/",
    ]
    assert "/srv" not in text and "{'" not in text  # no server path, no raw Python dict
    pt = log_text(events, "pt-BR")
    assert "◎ tarefa das datas (depois): 75% de acertos (75/100)" in pt and "concluído: 1.000 passos em 1 min 17 s" in pt
    assert "loss no último passo 0,007 (média do treino 0,500)" in pt  # the last step's loss, and the mean named as the mean
    # a run recorded before the last step's loss was written: the mean, said to be the mean
    old = event_line({"type": "done", "steps": 10, "duration_s": 5, "final_loss": 0.489, "output": "model"}, "pt-BR")
    assert "loss média do treino 0,489" in old and "última" not in old
    assert len(log_text([PROGRESS] * 500).splitlines()) == 200  # the newest lines only
    assert event_line({"type": "stopped", "step": 40, "checkpoint": "checkpoint-40"}, "pt-BR") == "‖ parado no passo 40 (checkpoint checkpoint-40)"
    assert event_line({"type": "error", "kind": "oom", "message": "CUDA out of memory"}) == "✖ error: CUDA out of memory"
