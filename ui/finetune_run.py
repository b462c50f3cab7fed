"""Panel 2, the watched run and its actions: status, progress, loss plot, log; resume, retry, delete, try it; download,
merge, GGUF export and push to the Hub. Training itself is a subprocess (engine/training/jobs.py) polled with gr.Timer."""

from __future__ import annotations

import secrets
import time
from types import SimpleNamespace

import gradio as gr

from engine import run_access
from engine.config import GgufSettings
from engine.fields import field_specs
from engine.refs import is_valid_run_name
from engine.training.jobs import JobManager
from engine.views import choices, offline, refresh, run_charts, run_control, run_history, run_view
from ui.errors import ui_errors
from ui.language import T, info, lang_of, tr
from ui.queues import QUIET
from ui.session import session_key

# The log boxes follow their newest line: gradio's own autoscroll only follows a box already scrolled to its end, and a
# box filled while its tab was hidden stays at the top. Run after each refresh; a person who scrolls up stops the
# following until they scroll back to the end.
FOLLOW_LOG_JS = """() => {
  for (const id of ["finetune-log", "finetune-raw-log"]) {
    const t = document.querySelector("#" + id + " textarea");
    if (!t || t.offsetParent === null) continue;
    if (!t.dataset.follow) {
      t.dataset.follow = "1";
      t.addEventListener("scroll", () => { t.dataset.follow = t.scrollHeight - t.scrollTop - t.clientHeight < 24 ? "1" : "0"; });
    }
    if (t.dataset.follow === "1") requestAnimationFrame(() => { t.scrollTop = t.scrollHeight; });
  }
}"""


def watched_run() -> SimpleNamespace:
    """The watched run: status, progress bar, loss plot (log scale, smoothing), date-task accuracy, the log for people
    and train.log itself (refreshed by the timer)."""
    status = gr.Markdown(T("finetune.no_run"), elem_id="finetune-status")
    progress = gr.HTML(elem_id="finetune-progress")
    plot = gr.LinePlot(x="step", y="y", color="kind", tooltip=["step", "loss", "kind"], color_map=run_charts.series_colors(), height=340,
                       label=T("finetune.plot.title"), show_label=False, elem_id="finetune-loss-plot")  # a shown label pushes the legend out
    log_scale = gr.Checkbox(value=False, label=T("finetune.plot.log"), elem_id="finetune-log-scale")
    smoothing = gr.Slider(0, 0.99, value=0.6, step=0.01, label=T("finetune.plot.smoothing"), info=T("finetune.plot.smoothing_info"),
                          elem_id="finetune-smoothing")
    task = gr.HTML(elem_id="finetune-task")
    log = gr.Textbox(label=T("finetune.log.label"), lines=8, max_lines=8, autoscroll=True, interactive=False, elem_id="finetune-log")
    with gr.Accordion(T("finetune.log.raw"), open=False):
        raw_log = gr.Textbox(show_label=False, lines=8, max_lines=8, autoscroll=True, interactive=False, elem_id="finetune-raw-log")
    return SimpleNamespace(status=status, log_scale=log_scale, smoothing=smoothing, outputs=[status, progress, plot, task, log, raw_log])


def run_actions(jobs: JobManager) -> SimpleNamespace:
    """The run picker, "Try it in the Playground" (a finished run with a model), resume, retry after OOM and delete."""
    with gr.Row():
        # filled for each session when it loads the page (never baked into the page's configuration: docs/security.md); a
        # typed or API-given name is checked by the run gate (engine/run_access.py), so an API caller need not load the page
        run_pick = gr.Dropdown(choices=[], value=None, allow_custom_value=True, label=T("finetune.actions.run"), info=T("finetune.actions.run_info"), scale=3,
                               elem_id="finetune-run-pick")
        with gr.Column(scale=2, min_width=160):
            try_btn = gr.Button(T("finetune.actions.try"), variant="primary", visible=False, elem_id="finetune-try")
    with gr.Row():
        # shown only where they apply to the picked run (run_view.run_buttons): no Resume on a finished run
        resume = gr.Button(T("finetune.actions.resume"), size="sm", visible=False, elem_id="finetune-resume")
        retry = gr.Button(T("finetune.actions.retry"), size="sm", visible=False, elem_id="finetune-retry")
        delete = gr.Button(T("finetune.actions.delete"), size="sm", variant="stop", visible=False, elem_id="finetune-delete")
    return SimpleNamespace(run_pick=run_pick, try_btn=try_btn, resume=resume, retry=retry, delete=delete)


def run_exports() -> SimpleNamespace:
    """Download the picked run, merge its adapter, export it to GGUF (behind a closed accordion)."""
    with gr.Accordion(T("finetune.export.title"), open=False):
        with gr.Row():
            zip_btn = gr.Button(T("finetune.export.zip"), size="sm")
            merge_btn = gr.Button(T("finetune.export.merge"), size="sm", visible=False, elem_id="finetune-merge")  # shown where it applies
        with gr.Row(equal_height=True):  # GGUF for llama.cpp / Ollama / LM Studio (engine/export/gguf.py): nothing to compile
            gguf_spec = field_specs(GgufSettings)[0]
            gguf_type = gr.Dropdown(choices=list(gguf_spec.choices), value=gguf_spec.default, label=T("field.GgufSettings.type.label"),
                                    info=T("field.GgufSettings.type.help"), scale=3)
            gguf_btn = gr.Button(T("finetune.export.gguf"), size="sm", scale=1)
        gguf_note = gr.Markdown(elem_id="finetune-gguf-note")
    download = gr.File(label=T("finetune.export.download"), visible=False)
    return SimpleNamespace(zip_btn=zip_btn, merge_btn=merge_btn, download=download, gguf_type=gguf_type, gguf_btn=gguf_btn, gguf_note=gguf_note)


def push_panel(jobs: JobManager, run_pick: gr.Dropdown, owner: gr.State) -> None:
    """Push the picked run (adapter, merged or full model) to the Hugging Face Hub with a token typed for this push only."""
    with gr.Accordion(T("finetune.push.title"), open=False):
        with gr.Row():
            push_repo = gr.Textbox(label=T("finetune.push.repo"), placeholder=T("finetune.push.repo_placeholder"), scale=3)
            whats = ("adapter", "merged", "model")  # values (the API's); their labels come from the language files
            push_what = gr.Radio([(T(f"finetune.push.what.{w}"), w) for w in whats], value=whats[0],
                                 label=T("finetune.push.what_label"), scale=2, info=T("finetune.push.what_info"))
            push_private = gr.Checkbox(value=True, label=T("finetune.push.private"), info=T("finetune.push.private_info"), scale=1)
        no_gguf = "none"
        push_gguf = gr.Radio([(T("finetune.push.gguf_none"), no_gguf), *field_specs(GgufSettings)[0].choices], value=no_gguf,
                             label=T("finetune.push.gguf"), info=T("finetune.push.gguf_info"))
        # The token is never returned to any output (the box is cleared after a push) and never read from the
        # server's HF_TOKEN: on a shared link that would let anyone push with the owner's account.
        push_token = gr.Textbox(type="password", label=T("finetune.push.token"), placeholder=T("finetune.push.token_placeholder"), info=T("finetune.push.token_info"))
        push_btn = gr.Button(T("finetune.push.button"), size="sm")
        push_result = gr.Markdown()

        @ui_errors
        def on_push(name, repo, what, private, token, gguf, owner_v, request: gr.Request):
            return run_control.push_finished_run(jobs, name, repo, what, private, token, gguf, owner=session_key(owner_v, request),
                                                 lang=lang_of(request)), ""

        def push_default(name):  # a full/scratch run has a model, not an adapter
            return run_control.push_default(jobs, name) or gr.skip()

        push_btn.click(on_push, [run_pick, push_repo, push_what, push_private, push_token, push_gguf, owner], [push_result, push_token],
                       api_name="push_to_hub")
        run_pick.change(push_default, [run_pick], [push_what], **QUIET, api_visibility="private")


def run_handlers(jobs: JobManager) -> SimpleNamespace:
    """Handlers of the run view (the run watched on load, the timer's refresh), this browser's key and the run actions;
    controlling a run checks that key (owner_v). Texts come in the visitor's language."""

    def on_load(request: gr.Request):
        name, runs = run_view.opening_run(jobs)
        # runs finished since the page was built; offline, the Hub models marked as needing the internet (in the visitor's language)
        models = gr.update(choices=offline.marked_choices(choices.train_model_choices(jobs), lang_of(request)))
        return name, gr.update(choices=runs, value=name), run_history.history_table(jobs, lang_of(request)), models, models

    def init_owner(key):  # a new browser gets a random key, kept in its local storage
        return (key or secrets.token_urlsafe(18),) * 2

    def buttons(pick):  # try it, resume, retry, delete, merge: each shown where it applies to the picked run
        return tuple(gr.update(visible=v) for v in (*run_view.run_buttons(jobs, pick), run_view.merge_applies(jobs, pick)))

    def poll_values(name, pick, log_scale, smoothing, lang):  # None, or (the parts' values, whether the run trains)
        pick = pick if pick and is_valid_run_name(pick) else None  # a name typed into the picker that no run can have: none
        for run in {name, pick} - {None, ""}:  # any visitor may watch a run (engine/run_access.py)
            run_access.check_run_access(jobs.runs_dir, run, None, "watch", plain=True, owner_only=jobs.owner_only)
        w = run_view.watched_outputs(jobs, name, lang, log_scale=bool(log_scale), smoothing=float(smoothing or 0))
        if w is None:
            return None
        # the picked run may not be the watched one (a resumed interrupted run is watched): its own facts
        details = w.details if pick == name else run_history.selected_details(jobs, pick, lang)
        return [w.status, w.progress, w.plot, w.task, w.log, w.raw_log, w.history, details], w.running

    def plot_update(frame, log_scale, lang):
        return gr.update(value=frame, title=tr("finetune.plot.title"), x_title=tr("finetune.plot.x"),
                         y_title=run_charts.y_title(bool(log_scale), lang), color_title=tr("finetune.plot.series"))

    def on_poll(name, pick, log_scale, smoothing, request: gr.Request):  # everything, now (a plot option was changed)
        lang = lang_of(request)
        polled = poll_values(name, pick, log_scale, smoothing, lang)
        if polled is None:
            return (gr.skip(),) * 8 + buttons(pick)
        values = polled[0]
        values[2] = plot_update(values[2], log_scale, lang)
        return *values, *buttons(pick)

    def on_tick(name, pick, log_scale, smoothing, seen, request: gr.Request):
        """The timer: only what changed (refresh.py); it sleeps once the watched run neither trains nor merges and
        everything is shown (each tick costs the browser CPU that a laptop's training needs). Start, Resume, Retry, Merge,
        the page load and watching another run call it at once, which wakes it."""
        lang = lang_of(request)
        polled = poll_values(name, pick, log_scale, smoothing, lang)
        if polled is None:
            return (gr.skip(),) * 8 + buttons(pick) + (seen, gr.Timer(active=False))
        values, running = polled
        send, seen = refresh.changed_parts(seen, [*values, name, lang, log_scale, smoothing], now=time.monotonic(), plot_index=2,
                                           running=running)
        if any(send[8:]):  # another run, language or plot option: everything is new
            send = [True] * 8
        values[2] = plot_update(values[2], log_scale, lang)
        parts = [v if sent else gr.skip() for v, sent in zip(values, send[:8], strict=True)]
        return *parts, *buttons(pick), seen, gr.Timer(active=running or any(send))

    def on_pick(name, request: gr.Request):  # the picked run: its details, its GGUF note and whether it can be tried
        lang = lang_of(request)
        return run_history.selected_details(jobs, name, lang), run_control.gguf_note(jobs, name, lang), *buttons(name)

    def on_history_select(evt: gr.SelectData):  # a row of the history: watch and pick that run
        name = (evt.row_value or [None])[0] if isinstance(evt.row_value, list) else None
        return (name, gr.update(value=name)) if name else (gr.skip(), gr.skip())

    @ui_errors
    def on_stop(name, owner_v, request: gr.Request):
        info(run_control.stop_run(jobs, name, session_key(owner_v, request), lang_of(request)))

    @ui_errors
    def on_resume(name, owner_v, request: gr.Request):
        info(run_control.resume_run(jobs, name, session_key(owner_v, request), lang_of(request)))
        return name

    @ui_errors
    def on_retry(name, owner_v, request: gr.Request):
        new, message = run_control.retry_run(jobs, name, session_key(owner_v, request), lang_of(request))
        info(message)
        return new, gr.update(choices=run_view.run_choices(jobs), value=new)

    @ui_errors
    def on_delete(name, owner_v, request: gr.Request):
        run_control.delete_run(jobs, name, session_key(owner_v, request))
        return None, gr.update(choices=run_view.run_choices(jobs), value=None), run_history.history_table(jobs, lang_of(request))

    @ui_errors
    def on_zip(name, owner_v, request: gr.Request):
        return gr.update(value=str(run_control.zip_for_download(jobs, name, session_key(owner_v, request))), visible=True)

    @ui_errors
    def on_merge(name, owner_v, request: gr.Request):
        info(run_control.merge_finished_run(jobs, name, session_key(owner_v, request), lang_of(request)))

    def on_offer(request: gr.Request):  # the newest interrupted run (a Colab disconnect), offered at the top of the panel
        name, text = run_view.resume_offer(jobs, lang_of(request))
        return gr.update(visible=bool(name)), text, name

    @ui_errors
    def on_gguf(name, gguf_type, owner_v, request: gr.Request):
        path, message = run_control.export_gguf_for_download(jobs, name, gguf_type, owner=session_key(owner_v, request), lang=lang_of(request))
        return gr.update(value=str(path), visible=True), message

    return SimpleNamespace(on_load=on_load, init_owner=init_owner, on_poll=on_poll, on_tick=on_tick, on_pick=on_pick, on_history_select=on_history_select,
                           on_stop=on_stop, on_resume=on_resume, on_retry=on_retry, on_delete=on_delete, on_zip=on_zip, on_merge=on_merge,
                           on_offer=on_offer, on_gguf=on_gguf)


def resume_banner() -> SimpleNamespace:
    """The offer to resume an interrupted run, shown at the top of the Fine-tune panel when there is one."""
    offered = gr.State(None)  # the interrupted run's name
    with gr.Row(visible=False) as row:
        text = gr.Markdown()
        btn = gr.Button(T("finetune.actions.resume"), variant="primary", scale=0, min_width=120)
    return SimpleNamespace(row=row, text=text, btn=btn, offered=offered, outputs=[row, text, offered])
