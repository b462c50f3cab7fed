"""The run view without gradio: run picker, status text, progress bar HTML, loss frame, what the timer refreshes, in
English and in Portuguese."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from engine.errors import JobError
from engine.runs import RunSummary
from engine.views.run_history import history_table
from engine.views.run_view import can_try, loss_frame, merge_applies, opening_run, progress_html, run_buttons, run_choices, status_md, watched_outputs


def _run(**kw) -> RunSummary:
    return RunSummary(**{"name": "r1", "path": Path("/runs/r1"), "state": "running", **kw})


def _jobs(*runs: RunSummary) -> SimpleNamespace:
    return SimpleNamespace(list_runs=lambda: list(runs), merge_events=lambda name: [], active_merge=lambda: None, active=lambda: None)


def test_status_text_for_running_finished_and_failed_runs():
    running = status_md(_run(phase="training", step=3, max_steps=1000, last_loss=2.5, predicted_gib=0.1, measured_gib=0.73, device="cpu"))
    assert running.startswith("### ● r1: running — training")
    assert "step **3 / 1,000** · loss **2.500**" in running
    # on a CPU: which number is the model's memory and which the whole process
    assert "predicted **0.10 GiB** for the model's training" in running and "**0.73 GiB** for the whole process" in running
    finished = status_md(_run(state="finished", output="adapter", task_scores={"before": 0.1, "after": 0.9}))
    assert "Date task accuracy: before **10%** → after **90%**" in finished and "`run:r1`" in finished and "Try it in the Playground" in finished
    failed = status_md(_run(state="failed", error="CUDA out of memory", error_kind="oom", resumable=True, device="cuda", measured_gib=3.0))
    assert "**Error:** CUDA out of memory" in failed and "Retry after OOM" in failed and "(Resume)" in failed
    assert "allocated by PyTorch on the GPU" in failed


def test_status_line_in_portuguese():
    s = _run(phase="scoring the date task (before)", step=1200, max_steps=2000, last_loss=1.2341, predicted_gib=0.1, measured_gib=0.73, device="cpu")
    text = status_md(s, "pt-BR")
    assert text.startswith("### ● r1: em andamento — medindo a tarefa das datas (antes)")
    assert "passo **1.200 / 2.000** · loss **1,234**" in text
    assert "previsão de **0,10 GiB** para o treino do modelo" in text and "**0,73 GiB** no pico do processo inteiro" in text
    done = status_md(_run(state="finished", output="model", task_scores={"before": 0.0, "after": 0.75}), "pt-BR")
    assert "r1: concluído" in done and "antes **0%** → depois **75%**" in done and "Testar no Playground" in done
    # a phase that is not one of the known ones is shown as the subprocess wrote it
    assert "— something new" in status_md(_run(phase="something new"), "pt-BR")


def test_progress_bar_shows_step_speed_time_left_and_the_base_pretraining_first():
    html = progress_html(_run(step=5, max_steps=20), {"tokens_per_s": 1234.4, "eta_s": 125})
    assert "width:25.0%" in html and "25% · step 5/20 · 1,234 tokens/s · about 2 min 05 s left" in html
    assert "width:100.0%" in progress_html(_run(state="finished", step=3, max_steps=20), None)
    base = progress_html(_run(base_progress={"step": 1, "max_steps": 4, "tokens_per_s": 10}), None)
    assert "pretraining the built-in model first (once) · 25%" in base
    pt = progress_html(_run(step=5, max_steps=20), {"tokens_per_s": 1234.4, "eta_s": 3725}, "pt-BR")
    assert "25% · passo 5/20 · 1.234 tokens/s · faltam cerca de 1 h 02 min" in pt
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
    assert run_choices(jobs) == ["a", "b"]


def test_try_it_only_for_a_finished_run_with_a_model(tmp_path):
    (tmp_path / "adapter").mkdir()
    assert can_try(_run(path=tmp_path, state="finished", output="adapter"))
    assert not can_try(_run(path=tmp_path, state="finished", output="model"))  # no model/ folder
    assert not can_try(_run(path=tmp_path, state="running", output=None))


def test_the_picked_runs_buttons_are_the_ones_that_apply(tmp_path):
    """(try it, resume, retry with a smaller batch, delete) for the picked run."""
    (tmp_path / "adapter").mkdir()
    runs = {"done": _run(path=tmp_path, state="finished", output="adapter"),
            "going": _run(path=tmp_path, state="running"),
            "stopped": _run(path=tmp_path, state="stopped", resumable=True),
            "oom": _run(path=tmp_path, state="failed", error_kind="oom", resumable=True),
            "nan": _run(path=tmp_path, state="failed", error_kind="nan", resumable=True),
            "no-ckpt": _run(path=tmp_path, state="failed", error_kind="engine", restartable=True)}

    def status(name):
        if name not in runs:
            raise JobError(f"There is no run {name!r}.")
        return runs[name]

    jobs = _jobs()
    jobs.status = status
    assert run_buttons(jobs, "done") == (True, False, False, True)  # no Resume on a finished run
    assert run_buttons(jobs, "going") == (False, False, False, False)  # Stop is beside Start
    assert run_buttons(jobs, "stopped") == (False, True, False, True)
    assert run_buttons(jobs, "oom") == (False, True, True, True)
    assert run_buttons(jobs, "nan") == (False, True, False, True)  # a smaller batch does not help a diverged loss
    assert run_buttons(jobs, "no-ckpt") == (False, True, False, True)  # Resume starts it again (the status says so)
    # Merge the adapter: offered for a finished adapter run only, never for a full run (then refused) or a running one
    runs["full"] = _run(path=tmp_path, state="finished", output="model")
    assert [merge_applies(jobs, n) for n in ("done", "full", "going", "stopped", None, "gone")] == [True, False, False, False, False, False]
    assert run_buttons(jobs, None) == run_buttons(jobs, "gone") == (False, False, False, False)


def test_watched_outputs_none_without_a_readable_run(tmp_path):
    (tmp_path / "events.jsonl").write_text('{"type": "progress", "step": 10, "max_steps": 100, "loss": 2.0, "lr": 0.0008}\n'
                                           '{"type": "task_score", "when": "before", "accuracy": 0.0, "n": 100, "examples": []}\n')
    run = _run(name="r", path=tmp_path, step=10, max_steps=100, losses=[{"step": 10, "loss": 2.0, "kind": "train"}])
    jobs = _jobs(run)

    def status(name):
        if name != "r":
            raise JobError(f"There is no run {name!r}.")
        return run

    jobs.status = status
    assert watched_outputs(jobs, None) is None and watched_outputs(jobs, "gone") is None
    w = watched_outputs(jobs, "r", "pt-BR", log_scale=False, smoothing=0.5)
    assert w.status == status_md(run, "pt-BR") and w.progress == progress_html(run, run.last_progress, "pt-BR")
    assert list(w.plot["loss"]) == [2.0] and list(w.plot["kind"]) == ["treino"]
    assert w.log.splitlines() == ["passo 10/100 · loss 2,000 · lr 0,0008", "◎ tarefa das datas (antes): 0% de acertos (0/100)"]
    assert "antes" in w.task and w.raw_log == "" and w.running
    assert list(w.history.columns) == list(history_table(jobs, "pt-BR").columns)


def test_watched_outputs_carry_the_details_of_the_run(tmp_path):
    from engine.views.run_history import run_details_md

    run = _run(name="r", path=tmp_path, state="finished", step=5, max_steps=5, output="model")
    jobs = _jobs(run)
    jobs.status = lambda name: run
    assert watched_outputs(jobs, "r", "pt-BR").details == run_details_md(run, "pt-BR")


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
    w = watched_outputs(jobs, "r", "en", log_scale=False, smoothing=0.0)
    assert "pretraining the built-in model" in w.progress
    points = w.plot[w.plot["kind"] == "pretraining"]
    assert list(points["step"]) == [10, 20] and list(points["loss"]) == [7.5, 6.25]
    assert set(w.plot["kind"]) == {"pretraining"}  # not mistaken for the run's own train or eval curve


def test_a_run_without_a_checkpoint_never_says_it_can_be_resumed():
    """A run that failed while loading has no checkpoint: the page says Resume starts it again, in both languages."""
    failed = _run(state="failed", error="Could not load the model", error_kind="engine", restartable=True)
    for lang in ("en", "pt-BR"):
        text = status_md(failed, lang)
        assert "(Resume)" not in text and "checkpoint (Retomar)" not in text
    assert "nothing to resume from" in status_md(failed) and "start" in status_md(failed)
    assert "Retomar** começa de novo" in status_md(failed, "pt-BR")
    with_ckpt = status_md(_run(state="failed", error="x", error_kind="engine", resumable=True))
    assert "resumed from its last checkpoint (Resume)" in with_ckpt and "nothing to resume from" not in with_ckpt


def test_progress_and_time_left_through_every_phase():
    """Loading, measuring the date task before training, training, measuring after, saving: each shows its name, a
    percent, and its time left when it can know it (the measurement reports its answers as events), never "0 s left" for
    a phase that is still going."""
    t0 = 1_000.0
    loading = progress_html(_run(phase="loading builtin:compact-mini", phase_since=t0, max_steps=500), None, now=t0 + 12)
    assert "loading builtin:compact-mini · 0% · for 12 s so far" in loading and "left" not in loading
    measuring = _run(phase="scoring the date task (before)", phase_since=t0, max_steps=500,
                     phase_progress={"when": "before", "done": 32, "total": 100, "eta_s": 68})
    html = progress_html(measuring, None, now=t0 + 30)
    assert "width:32.0%" in html and "scoring the date task (before) · 32% · 32/100 answers · about 1 min 08 s left" in html
    pt = progress_html(measuring, None, "pt-BR", now=t0 + 30)
    assert "32/100 respostas" in pt and "faltam cerca de 1 min 08 s" in pt and "medindo a tarefa das datas (antes)" in pt
    # the first steps, before any speed is known: how long so far rather than nothing
    first = progress_html(_run(phase="training", phase_since=t0, max_steps=500), None, now=t0 + 5)
    assert "0% · step 0/500 · for 5 s so far" in first
    # training: the time left includes the measurement after training (as long as the one before took)
    training = _run(phase="training", step=400, max_steps=500, task_seconds={"before": 60.0}, task_scores={"before": 0.0})
    html = progress_html(training, {"tokens_per_s": 900, "eta_s": 0}, now=t0)
    assert "about 1 min 00 s left (the date task's measurement after training included)" in html and "about 0 s left" not in html
    after = _run(phase="scoring the date task (after)", step=500, max_steps=500, phase_since=t0,
                 phase_progress={"when": "after", "done": 96, "total": 100, "eta_s": 2})
    assert "96/100 answers · about 2 s left" in progress_html(after, {"eta_s": 0}, now=t0 + 50)
    saving = progress_html(_run(phase="saving", step=500, max_steps=500, phase_since=t0), {"eta_s": 0}, now=t0 + 3)
    assert "saving · 100% · for 3 s so far" in saving and "0 s left" not in saving


def test_the_measurement_events_fold_into_the_run_summary(tmp_path):
    from engine.config import TrainConfig
    from engine.runs import EventLog, save_config, summarize

    save_config(tmp_path, TrainConfig())
    log = EventLog(tmp_path / "events.jsonl")
    log.write("start")
    log.write("phase", phase="scoring the date task (before)")
    log.write("task_progress", when="before", done=16, total=100, elapsed_s=10.0, eta_s=52.5)
    s = summarize(tmp_path, alive=True)
    assert s.phase_progress["done"] == 16 and s.phase_since is not None
    log.write("task_score", when="before", accuracy=0.0, n=100, seconds=61.0)
    log.write("phase", phase="training")
    s = summarize(tmp_path, alive=True)
    assert s.phase_progress is None and s.task_seconds == {"before": 61.0}
