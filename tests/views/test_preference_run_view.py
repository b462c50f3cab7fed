"""The preference methods as a student meets them (issue 33): the base a method is offered and what the form says of
the chosen base before Start, the run's phases in the visitor's language, its progress (steps, speed, time left) once it
trains, charts with axes and a line on what good looks like, and the headline result that applies to the run."""

from __future__ import annotations

import time

from conftest import finish_run

from engine.config import TrainConfig
from engine.runs import EventLog, summarize
from engine.training.jobs import JobManager
from engine.views.finetune_form import method_values
from engine.views.preference_base import base_note, learned_run
from engine.views.run_charts import objective_html
from engine.views.run_log import event_line, phase_text
from engine.views.run_result import headline_md, task_verdict
from engine.views.run_view import progress_html, status_md

DPO_EVENTS = [{"type": "progress", "step": 10, "loss": 0.6, "reward_margin": 0.25, "pref_accuracy": 0.75},
              {"type": "progress", "step": 20, "loss": 0.5, "reward_margin": 0.5, "pref_accuracy": 0.875}]


def _run(runs, name, cfg, *, before=None, after=None, extra=()):
    """A finished run folder with date-task scores `before`/`after` (None: not scored) and `extra` events."""
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    finish_run(run_dir, cfg)
    (run_dir / ("adapter" if cfg.weights in ("lora", "qlora") else "model")).mkdir()
    lines = [line for line in (run_dir / "events.jsonl").read_text().splitlines() if '"task_score"' not in line]
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    log = EventLog(run_dir / "events.jsonl")
    for ev in extra:
        log.write(ev["type"], **{k: v for k, v in ev.items() if k != "type"})
    for when, acc in (("before", before), ("after", after)):
        if acc is not None:
            log.write("task_score", when=when, accuracy=acc, n=100, examples=[])
    return run_dir


def test_picking_a_preference_method_offers_the_newest_run_that_learned_the_task(tmp_path):
    jobs = JobManager(tmp_path)
    assert learned_run(jobs) is None and "base_model" not in method_values("dpo", jobs)
    _run(tmp_path, "sft-old", TrainConfig(method="full", dataset="builtin:dates"), before=0.0, after=0.6)
    time.sleep(0.01)
    _run(tmp_path, "sft-new", TrainConfig(method="full", dataset="builtin:dates"), before=0.0, after=0.91)
    time.sleep(0.01)
    _run(tmp_path, "instr", TrainConfig(method="full", dataset="builtin:instructions"))  # newest, but never scored on the task
    _run(tmp_path, "sft-bad", TrainConfig(method="full", dataset="builtin:dates"), before=0.0, after=0.0)
    assert learned_run(jobs).name == "sft-new"
    for method in ("dpo", "orpo", "grpo"):
        assert method_values(method, jobs)["base_model"] == "run:sft-new"
    assert method_values("lora", jobs) == {}  # the supervised methods keep the form's base


def test_before_start_the_form_says_what_the_base_scores_and_that_zero_gives_grpo_nothing(tmp_path):
    jobs = JobManager(tmp_path)
    grpo = TrainConfig(method="grpo", base_model="builtin:compact-mini", dataset="builtin:dates")
    note = base_note(grpo, jobs, "en")
    assert note.startswith("⚠") and "0%" in note and "nothing to reward" in note and "Train one first" in note
    pt = base_note(grpo, jobs, "pt-BR")
    assert "não tem o que recompensar" in pt and "Treine um antes" in pt
    _run(tmp_path, "sft", TrainConfig(method="full", dataset="builtin:dates"), before=0.0, after=0.91)
    assert "Start from run:sft instead (91% on the date task)" in base_note(grpo, jobs, "en")
    assert base_note(TrainConfig(method="dpo", base_model="run:sft"), jobs, "en").startswith("ℹ run:sft scores 91%")
    assert base_note(TrainConfig(method="full", base_model="builtin:compact-mini"), jobs) == ""  # SFT starts anywhere
    assert base_note(TrainConfig(method="dpo", base_model="builtin:compact-mini-dates"), jobs).startswith("ℹ")  # the shipped example: 92%


def test_the_preference_phases_are_in_the_visitors_language():
    for phase in ("DPO reference: the starting model through a frozen copy of the adapter (no second model in memory)",
                  "DPO reference: a frozen copy of the starting model", "GRPO: 8 answers per prompt, rewards dates, date_parts",
                  "making pairs from the starting model's mistakes on the date task"):
        pt = phase_text(phase, "pt-BR")
        assert pt != phase and pt != phase_text(phase, "en") and "{" not in pt
    assert "8 respostas por prompt" in phase_text("GRPO: 8 answers per prompt, rewards dates, date_parts", "pt-BR")
    line = event_line({"type": "mistakes", "prompts": 256, "answers": 1024, "correct": 300, "pairs": 650}, "pt-BR")
    assert line.startswith("◇") and "650 pares" in line


def test_a_training_dpo_run_shows_steps_speed_and_time_left(tmp_path):
    run_dir = tmp_path / "dpo"
    run_dir.mkdir()
    from engine.runs import save_config

    save_config(run_dir, TrainConfig(method="dpo", tuning="full", dataset="builtin:date-mistakes"))
    log = EventLog(run_dir / "events.jsonl")
    log.write("start", run="dpo", method="dpo")
    log.write("phase", phase="making pairs from the starting model's mistakes on the date task")
    log.write("mistakes_progress", done=64, total=256, elapsed_s=10.0, eta_s=30.0)
    s = summarize(run_dir, alive=True)
    bar = progress_html(s, s.last_progress, "pt-BR")
    assert "respondendo os prompts de treino" in bar and "64" in bar and "256" in bar  # the phase's own progress
    log.write("phase", phase="DPO reference: a frozen copy of the starting model")
    log.write("phase", phase="training")
    log.write("progress", step=20, max_steps=100, loss=0.6, tokens_per_s=812.0, eta_s=95.0, reward_margin=0.3, pref_accuracy=0.8)
    s = summarize(run_dir, alive=True)
    bar = progress_html(s, s.last_progress, "pt-BR")
    assert "20%" in bar and "20/100" in bar.replace("\u202f", "") and "812" in bar and "1 min 35 s" in bar


def test_each_chart_has_axes_and_says_what_good_looks_like():
    page = objective_html(DPO_EVENTS, "dpo", "en")
    assert page.count("<svg") == 2 and page.count("<line") >= 4  # two axes per chart
    assert ">10<" in page and ">20<" in page and ">step<" in page  # the steps along the bottom
    assert ">88%<" in page and ">50%<" in page  # the accuracy's values up the side, and the coin toss's dashed line
    assert "Good: climbing towards 100%" in page and "Good: rising above 0" in page
    pt = objective_html(DPO_EVENTS, "dpo", "pt-BR")
    assert "Bom: subir rumo a 100%" in pt and ">passo<" in pt


def test_the_run_says_in_plain_words_whether_it_improved_the_task():
    assert "improved the date task by 14 points" in task_verdict(0.23, 0.37)
    assert "No clear change" in task_verdict(0.23, 0.26) and "within the noise" in task_verdict(0.23, 0.26)
    assert "worse by 12 points" in task_verdict(0.23, 0.11)
    assert "melhorou a tarefa de datas em 14 pontos" in task_verdict(0.23, 0.37, "pt-BR")


def test_the_headline_is_the_date_task_for_date_data_and_the_held_out_pairs_otherwise(tmp_path):
    mistakes = _run(tmp_path, "dpo-m", TrainConfig(method="dpo", tuning="full", base_model="run:sft", dataset="builtin:date-mistakes"),
                    before=0.23, after=0.38)
    text = status_md(summarize(mistakes, alive=False), "en")
    assert "improved the date task by 15 points" in text and "Date task" in text
    evals = [{"type": "data", "train_examples": 470, "eval_examples": 24},
             {"type": "eval", "step": 150, "eval_loss": 0.4, "pref_accuracy": 0.92}]
    prefs = _run(tmp_path, "dpo-p", TrainConfig(method="dpo", tuning="full", base_model="builtin:compact-mini", dataset="builtin:preferences"),
                 before=0.0, after=0.0, extra=evals)
    text = status_md(summarize(prefs, alive=False), "en")
    head = text.index("held-out pairs the chosen answer now wins 92%")
    assert "24 held-out pairs" in text and head < text.index("Also scored on the date task")  # the pairs first; the date task says it is aside
    assert "improved" not in text and "No clear change" not in text
    assert "nos 24 pares separados" in status_md(summarize(prefs, alive=False), "pt-BR").lower()
    grpo = [{"type": "progress", "step": 10, "loss": 0.0, "reward_mean": 0.2}, {"type": "progress", "step": 20, "loss": 0.0, "reward_mean": 0.45}]
    s = summarize(_run(tmp_path, "grpo-i", TrainConfig(method="grpo", dataset="builtin:instructions"), extra=grpo), alive=False)
    assert "Mean reward: 0.2 at the first logged step → 0.45 now" in headline_md(s, grpo, "en")


def test_a_kto_run_on_labelled_answers_is_judged_by_the_held_out_answers_margin(tmp_path):
    """KTO has no pairs to count wins on: its headline is how far the held-out good answers' reward is above the bad ones'
    (trl's eval_rewards/margins, the eval event's reward_margin), in the visitor's language."""
    evals = [{"type": "data", "train_examples": 445, "eval_examples": 49},
             {"type": "eval", "step": 30, "eval_loss": 0.43, "reward_margin": 1.234, "kl": 0.8}]
    run = _run(tmp_path, "kto-f", TrainConfig(method="kto", tuning="full", base_model="run:sft", dataset="builtin:feedback"),
               before=0.22, after=0.23, extra=evals)
    s = summarize(run, alive=False)
    events = [*evals]
    assert "49 held-out labelled answers the good ones now score 1.2 above the bad ones" in headline_md(s, events, "en")
    assert "49 respostas rotuladas separadas para avaliação as boas agora pontuam 1,2 acima" in headline_md(s, events, "pt-BR")
    flat = [evals[0], {**evals[1], "reward_margin": -0.05}]
    assert "not above 0 yet" in headline_md(s, flat, "en")
    text = status_md(s, "en")
    assert text.index("held-out labelled answers") < text.index("Also scored on the date task")
