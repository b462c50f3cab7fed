"""A shorter first run, suggested when this machine would take more than about ten minutes: from the run's own measured
seconds per step, the measured settings of presets/first_run.yaml with their time here and their accuracy."""

from __future__ import annotations

from engine.config import TrainConfig
from engine.runs import RunSummary, save_config
from engine.views.run_suggest import MIN_TIMED_STEPS, SLOW_RUN_S, first_run_points, shorter_run_md, shorter_runs

FIRST = {"method": "full", "base_model": "builtin:compact-mini", "dataset": "builtin:dates", "max_steps": 500, "max_seq_len": 72,
         "micro_batch_size": 16, "learning_rate": 1e-3}


def _running(tmp_path, per_step: float, step: int = 20, **cfg) -> RunSummary:
    config = TrainConfig(**{**FIRST, **cfg})
    save_config(tmp_path, config)
    return RunSummary(name="first", path=tmp_path, state="running", phase="training", method=config.method, base_model=config.base_model,
                      dataset=config.dataset, step=step, max_steps=config.max_steps, task_scores={"before": 0.0}, task_seconds={"before": 90.0},
                      last_progress={"step": step, "elapsed_s": per_step * step, "eta_s": per_step * (config.max_steps - step)})


def test_the_measurements_are_data_with_their_sources():
    points = first_run_points()
    assert any(p.max_steps == 500 and p.max_seq_len == 72 and p.accuracy == 0.92 for p in points)  # the README's first run
    assert all(p.source and 0 <= p.accuracy <= 1 for p in points)


def test_a_slow_first_run_gets_shorter_settings_with_time_here_and_accuracy(tmp_path):
    text = shorter_run_md(_running(tmp_path, per_step=7.0))  # the "about 59 min left"
    assert text.startswith("◷ This run needs **about") and "(7 s a step now)" in text
    assert "**250 steps**, sequence length 72, micro batch 16: about 32 min 10 s here, **~6%** correct" in text  # 250 x 7 s + 2 x 90 s
    assert "**350 steps**, sequence length 72, micro batch 16: about 43 min 50 s here, **~68%** correct" in text
    assert "**500 steps**, sequence length 72, micro batch 8: about 32 min 10 s here, **~44%** correct" in text
    assert "**1000 steps**" not in text  # longer than this run: not suggested
    assert "Max steps" in text
    pt = shorter_run_md(_running(tmp_path, per_step=7.0), "pt-BR")
    assert "**250 passos**" in pt and "(7 s por passo agora)" in pt and "Máximo de passos" in pt


def test_no_suggestion_for_a_fast_run_another_kind_of_run_or_before_the_first_steps(tmp_path):
    assert shorter_run_md(_running(tmp_path, per_step=0.12)) == ""  # about a minute: the first run as the README says
    assert shorter_run_md(_running(tmp_path, per_step=7.0, method="lora")) == ""  # the measurements are of full fine-tunes
    not_yet = _running(tmp_path, per_step=7.0)
    not_yet.last_progress = None
    assert shorter_run_md(not_yet) == ""
    measuring = _running(tmp_path, per_step=7.0)
    measuring.phase = "scoring the date task (after)"
    assert shorter_run_md(measuring) == ""
    # no advice from fewer than MIN_TIMED_STEPS steps of timing (issue 32: at step 1 a first run was told to stop)
    assert shorter_run_md(_running(tmp_path, per_step=7.0, step=1)) == "" and shorter_run_md(_running(tmp_path, per_step=7.0, step=19)) == ""
    assert shorter_run_md(_running(tmp_path, per_step=7.0, step=MIN_TIMED_STEPS)) != ""


def test_the_time_of_a_setting_scales_with_the_tokens_a_step_reads():
    options = dict(((p.max_steps, p.micro_batch_size), took) for p, took in shorter_runs(2.0, 500, 72, 16))
    assert options[(250, 16)] == 500.0 and options[(500, 8)] == 500.0  # half the steps, or half the rows a step
    assert (500, 16) not in options and (1000, 16) not in options
    assert SLOW_RUN_S == 600.0
