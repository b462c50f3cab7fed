"""The run view without gradio: run picker and history rows, status text, progress bar HTML, loss frame."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from engine.errors import JobError
from engine.runs import RunSummary
from engine.views.run_view import HISTORY_HEADERS, history_rows, loss_frame, opening_run, progress_html, run_choices, status_md, watched_outputs


def _run(**kw) -> RunSummary:
    return RunSummary(**{"name": "r1", "path": Path("/runs/r1"), "state": "running", **kw})


def _jobs(*runs: RunSummary) -> SimpleNamespace:
    return SimpleNamespace(list_runs=lambda: list(runs), merge_events=lambda name: [], active_merge=lambda: None, active=lambda: None)


def test_history_rows_match_the_headers_and_format_memory_scores_and_durations():
    done = _run(name="done", state="finished", method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", step=10, max_steps=10,
                best_eval_loss=1.234567, duration_s=61.6, predicted_gib=1.5, measured_gib=1.25, task_scores={"before": 0.0, "after": 0.75}, resumable=True)
    fresh = _run(name="fresh", state="created", measured_gib=0.5)
    jobs = _jobs(done, fresh)
    rows = history_rows(jobs)
    assert all(len(r) == len(HISTORY_HEADERS) for r in rows)
    assert rows[0] == ["done", "finished", "lora", "builtin:compact-mini", "builtin:dates", "10/10", 1.2346, "0% → 75%", 62, "1.50 / 1.25", "yes"]
    assert rows[1][5:] == ["0/0", None, "", None, "- / 0.50", ""]
    assert run_choices(jobs) == ["done", "fresh"]


def test_status_text_for_running_finished_and_failed_runs():
    running = status_md(_run(phase="training", step=3, max_steps=10, last_loss=2.5, predicted_gib=1.0, measured_gib=0.8, device="cpu"))
    assert running.startswith("### 🟢 r1: running — training")
    assert "step **3 / 10** · loss **2.5000**" in running and "(process RSS peak on CPU)" in running
    finished = status_md(_run(state="finished", output="adapter", task_scores={"before": 0.1, "after": 0.9}))
    assert "date task accuracy: before **10%** → after **90%**" in finished and "choose `run:r1` in the Playground" in finished
    failed = status_md(_run(state="failed", error="CUDA out of memory", error_kind="oom", resumable=True, device="cuda", measured_gib=3.0))
    assert "**Error:** CUDA out of memory" in failed and "Retry after OOM" in failed and "(Resume)" in failed and "torch max allocated" in failed


def test_progress_bar_shows_speed_eta_and_the_base_pretraining_first():
    html = progress_html(_run(step=5, max_steps=20), {"tokens_per_s": 123.4, "eta_s": 125})
    assert "width:25.0%" in html and "25% · 123 tokens/s · ETA 2m05s" in html
    assert "width:100.0%" in progress_html(_run(state="finished", step=3, max_steps=20), None)
    base = progress_html(_run(base_progress={"step": 1, "max_steps": 4, "tokens_per_s": 10}), None)
    assert "pretraining the built-in base · 25%" in base and "ETA" not in base
    assert "0%" in progress_html(_run(state="created"), None)


def test_loss_frame_has_numeric_axes_and_an_object_colour_column():
    df = loss_frame([{"step": 1, "loss": 2.0, "kind": "train"}, {"step": 2, "loss": 1.5, "kind": "eval"}])
    assert list(df.columns) == ["step", "loss", "kind"]
    assert str(df["step"].dtype) == "int64" and str(df["loss"].dtype) == "float64" and df["kind"].dtype == object
    assert loss_frame([]).empty


def test_opening_run_is_the_active_one_else_the_first_listed():
    a, b = _run(name="a", state="finished"), _run(name="b", state="stopped")
    jobs = _jobs(a, b)
    jobs.active = lambda: None
    assert opening_run(jobs) == ("a", ["a", "b"])
    jobs.active = lambda: "b"
    assert opening_run(jobs) == ("b", ["a", "b"])
    empty = _jobs()
    empty.active = lambda: None
    assert opening_run(empty) == (None, [])


def test_watched_outputs_none_without_a_readable_run(tmp_path):
    run = _run(name="r", path=tmp_path, step=3, max_steps=10, losses=[{"step": 1, "loss": 2.0, "kind": "train"}])
    jobs = _jobs(run)

    def status(name):
        if name != "r":
            raise JobError(f"There is no run {name!r}.")
        return run

    jobs.status = status
    assert watched_outputs(jobs, None) is None and watched_outputs(jobs, "gone") is None
    md, html, frame, log, rows = watched_outputs(jobs, "r")
    assert md == status_md(run) and html == progress_html(run, run.last_progress) and list(frame["loss"]) == [2.0]
    assert isinstance(log, str) and rows == history_rows(jobs)


def test_the_loss_plot_shows_the_built_in_bases_pretraining_while_it_runs(tmp_path):
    """A run whose built-in base is pretrained first: the pretraining's progress, mirrored into the run's events by
    EventsCallback, is a "pretraining" series of the loss plot before the run's own training has a single point."""
    from transformers import TrainerControl, TrainerState

    from engine.config import TrainConfig
    from engine.hardware.device import DeviceInfo
    from engine.runs import EventLog, save_config, summarize
    from engine.training.callbacks import EventsCallback

    run_dir, base_dir = tmp_path / "runs" / "r", tmp_path / "runs" / "_builtin" / "compact-course"
    save_config(run_dir, TrainConfig(method="full", base_model="builtin:compact-course", dataset="builtin:dates"))
    parent = EventLog(run_dir / "events.jsonl")
    parent.write("start", device_kind="cpu")
    parent.write("phase", phase="pretraining the built-in model 'compact-course' on the built-in corpus (first use only)")
    cb = EventsCallback(EventLog(base_dir / "events.jsonl"), DeviceInfo("cpu", "x86 CPU", 16.0, True, None), mirror=parent)
    state = TrainerState(max_steps=400)
    for step, loss in [(10, 7.5), (20, 6.25)]:
        state.global_step = step
        cb.on_log(None, state, TrainerControl(), logs={"loss": loss, "learning_rate": 1e-3})
    cb.on_log(None, state, TrainerControl(), logs={"eval_loss": 6.5})
    s = summarize(run_dir, alive=True)
    jobs = _jobs(s)
    jobs.status = lambda name: s
    _md, html, frame, _log, _rows = watched_outputs(jobs, "r")
    assert "pretraining the built-in base" in html
    points = frame[frame["kind"] == "pretraining"]
    assert list(points["step"]) == [10, 20] and list(points["loss"]) == [7.5, 6.25]
    assert set(frame["kind"]) == {"pretraining"}  # not mistaken for the run's own train or eval curve
