"""Panel 3, the Benchmarks tab: lm-evaluation-harness tasks on a model or a run (and its base) as a job beside training
(engine/training/bench_job.py), its progress polled with gr.Timer, and the before/after table and chart per task
(engine/views/bench_view.py). What the optional package needs, and what needs the Hub, is said before the click."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from engine import i18n
from engine.config import BenchConfig
from engine.estimator.handoff import check_ui_model_ref
from engine.inference.harness import INSTALL_COMMAND, harness_missing
from engine.models.hub_access import hub_online
from engine.training.bench_job import BenchJobs
from engine.views import bench_view
from ui.errors import ui_errors
from ui.language import T, info, lang_of, tr
from ui.widgets import make_inputs, named

SETTINGS = ["limit", "quant", "batch_size", "with_base"]  # BenchConfig's fields beside the model and the tasks, in field order
DEFAULT_TASKS = ["dates_mc"]


def notes(lang: str) -> str:
    """What stops a click before it happens: the optional package missing (with its install command), no Hub here."""
    if harness_missing():
        return i18n.t("bench.missing", lang, command=INSTALL_COMMAND)
    return "" if hub_online() else i18n.t("bench.offline_note", lang)


def bench_tab(models: list[str], default: str | None) -> SimpleNamespace:
    """The model, the tasks (offline ones marked), the settings, Start/Stop, the progress line, the table and the chart."""
    ready = not harness_missing()
    gr.Markdown(T("bench.intro"))
    note = gr.Markdown(notes("en"), elem_id="bench-note")
    model = gr.Dropdown(choices=models, value=default, allow_custom_value=True, label=T("bench.model"), info=T("bench.model_info"),
                        elem_id="bench-model")
    tasks = named(gr.CheckboxGroup(choices=bench_view.task_choices("en"), value=DEFAULT_TASKS, label=T("bench.tasks"), info=T("bench.tasks_info"),
                                   elem_id="bench-tasks"), "tasks", "BenchConfig")  # a wrong name: refused naming the field, the allowed listed
    with gr.Row():
        settings = make_inputs(BenchConfig, only=SETTINGS)
    with gr.Row():
        start = gr.Button(T("bench.start"), variant="primary", interactive=ready, elem_id="bench-start")
        stop = gr.Button(T("bench.stop"), elem_id="bench-stop")
    status = gr.Markdown(elem_id="bench-status")
    table = gr.Dataframe(label=T("bench.results"), interactive=False, wrap=True, elem_id="bench-table")
    chart = gr.BarPlot(x="task", y="score", color="model", label=T("bench.chart"), y_lim=[0, 100], elem_id="bench-chart")
    with gr.Accordion(T("bench.about"), open=False):
        about = gr.Dataframe(value=bench_view.tasks_table("en"), interactive=False, wrap=True, elem_id="bench-about")
    timer = gr.Timer(2.0, active=False)
    return SimpleNamespace(note=note, model=model, tasks=tasks, settings=[settings[n] for n in SETTINGS], start=start, stop=stop,
                           status=status, table=table, chart=chart, about=about, timer=timer)


def wire_bench(bench: BenchJobs, b: SimpleNamespace, owner: Any, allow_local_models: bool) -> Any:
    """The tab's events and API endpoints (bench_start, bench_stop, bench_results); returns its on-load handler (the note and
    the table in the visitor's language, the timer on when a job runs: a reopened page re-attaches)."""
    runs_dir = bench.runs_dir
    view_outputs = [b.status, b.table, b.chart, b.timer]

    def view(ref_v: str | None, lang: str) -> list[Any]:
        """The progress line (the running job's, else the picked model's latest), the table and chart of the picked model."""
        running = bench.active()
        ref = check_ui_model_ref(ref_v, runs_dir, allow_local=allow_local_models) if ref_v else None
        sides = bench_view.sides(runs_dir, ref) if ref else []
        folder = running or (sides[-1][1] if sides else None)
        line = bench_view.status_md(bench.events(folder), running is not None, lang) if folder else ""
        if running and not line:  # launched, its first event not written yet
            line = i18n.t("bench.status.launch", lang)
        table, bars = bench_view.comparison(sides, lang) if sides else (None, None)
        if sides and table is not None and table.empty and not line:
            line = i18n.t("bench.none_yet", lang, model=ref)
        return [line, table, bars, gr.Timer(active=running is not None)]

    def key(request: gr.Request, owner_v: str | None) -> str | None:
        return owner_v or request.session_hash  # the browser's key; an API caller's gradio session

    @ui_errors
    def on_start(request: gr.Request, owner_v, ref_v, task_names, *values):
        lang = lang_of(request)
        ref = check_ui_model_ref(ref_v, runs_dir, allow_local=allow_local_models)
        cfg = BenchConfig(model=ref, tasks=",".join(task_names or []), **dict(zip(SETTINGS, values, strict=True)))
        bench.start(cfg, owner=key(request, owner_v))
        info(tr("bench.started"), request)
        return view(ref, lang)

    @ui_errors
    def on_stop(request: gr.Request, owner_v, ref_v):
        bench.stop(owner=key(request, owner_v))
        return view(ref_v, lang_of(request))

    @ui_errors
    def on_view(request: gr.Request, ref_v):
        return view(ref_v, lang_of(request))

    b.start.click(on_start, [owner, b.model, b.tasks, *b.settings], view_outputs, api_name="bench_start")
    b.stop.click(on_stop, [owner, b.model], view_outputs, api_name="bench_stop")
    b.model.change(on_view, [b.model], view_outputs, api_name="bench_results")
    b.timer.tick(on_view, [b.model], view_outputs, api_visibility="private")

    def on_load(request: gr.Request, ref_v: str | None) -> list[Any]:
        lang = lang_of(request)
        return [notes(lang), gr.CheckboxGroup(choices=bench_view.task_choices(lang)), bench_view.tasks_table(lang), *view(ref_v, lang)]

    return on_load, [b.note, b.tasks, b.about, *view_outputs]
