"""Panel 2, the Fine-tune panel put together: the form (finetune_form), the watched run (finetune_run) and their events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from engine import run_access
from engine.training.jobs import JobManager
from engine.views import finetune_form, offline, run_history, run_view
from ui.errors import ui_errors
from ui.finetune_form import finetune_details, finetune_settings, form_handlers
from ui.finetune_run import FOLLOW_LOG_JS, push_panel, resume_banner, run_actions, run_exports, run_handlers, watched_run
from ui.language import T, lang_of
from ui.mix import mix_panel, wire_mix
from ui.queues import GPU, JOBS, QUIET
from ui.session import mark_run_refs, session_key
from ui.widgets import form_update


def build_finetune(jobs: JobManager, upload_dir: Path, allow_local_models: bool = False) -> dict[str, Any]:
    """The Fine-tune panel. Phone-first order: the essentials and Start/Stop, then the watched run's results, then the
    closed accordions of details, the exports and the run history (a desktop shows each pair side by side)."""
    watched = gr.State(None)  # the run this browser session is watching
    owner = gr.State(None)  # this browser's key (see build_app), as a session State: it never appears in the API
    card = gr.State(None)  # the card the estimator planned these settings for (its hand-off): its prediction beside this machine's
    banner = resume_banner()
    with gr.Row(elem_classes="form-results"):
        with gr.Column(scale=2):
            f = finetune_settings(jobs)
        with gr.Column(scale=3):
            act = run_actions(jobs)
            view = watched_run()
    with gr.Row():
        with gr.Column(scale=2):
            more = finetune_details()
        with gr.Column(scale=3):
            exp = run_exports()
            push_panel(jobs, act.run_pick, owner)
            mix = mix_panel()
            # five short columns on one line each (no word broken mid-word; a phone scrolls the table sideways); the rest of a
            # run's facts show on select
            history = gr.Dataframe(headers=[T(f"finetune.history.col.{c}") for c in run_history.HISTORY_COLUMNS], interactive=False,
                                   label=T("finetune.history.label"), elem_id="finetune-history")
            details = gr.Markdown(elem_id="finetune-run-details")
    comps = {**f.comps, **more.comps}
    form = {n: comps[n] for n in finetune_form.FT_MAIN + finetune_form.FT_TRAIN + finetune_form.FT_LORA + finetune_form.FT_RUN + finetune_form.FT_DATA}
    inputs = [f.upload, *form.values(), more.eval_upload]  # the API's order (form_handlers): upload, the fields, the eval upload
    run_pick = act.run_pick
    mark_run_refs(run_pick, form["base_model"], form["teacher_model"])  # each endpoint taking one asks the run gate
    # the fields of one method only (distill's teacher, dpo/orpo/grpo's weights, beta, rewards, answers): shown for that method
    shown = finetune_form.visible_fields(finetune_form.FT_DEFAULTS.get("method", ""))
    method_only = [form[n] for n in shown]
    for n, comp in zip(shown, method_only, strict=True):  # read when the page is built; toggled below
        comp.visible = shown[n]
    # picking dpo/orpo/grpo fills in the settings measured for it, and the newest run that learned the task as the base
    measured = sorted({n for values in finetune_form.METHOD_DEFAULTS.values() for n in values} | {"base_model"})

    form["method"].info = T(f"method_help.{finetune_form.FT_DEFAULTS['method']}")  # the picked method's line (what it needs, does)

    def on_method_shown(method, request: gr.Request):  # also when a preset or the estimator's handoff sets the method
        visible = finetune_form.visible_fields(method)
        return [gr.update(info=finetune_form.method_help(method, lang_of(request))), *[gr.update(visible=visible[n]) for n in shown]]

    def on_method_picked(method, owner_v, request: gr.Request):  # a person picked it: the measured settings of dpo/orpo/kto/grpo
        values = finetune_form.method_values(method, jobs, session_key(owner_v, request))
        return [form_update(form[n], values[n]) if n in values else gr.skip() for n in measured]
    # every 2 s, and asleep when nothing moves (on_tick): each tick costs the browser about 0.1-0.2 s of CPU whatever it
    # carries, which a 2-core laptop takes from the training (bench/watch_cost.py)
    timer = gr.Timer(2.0)
    fh, rh = form_handlers(jobs, upload_dir, allow_local_models, form), run_handlers(jobs)
    run_buttons = [act.try_btn, act.resume, act.retry, act.delete, exp.merge_btn]  # merge: a finished LoRA/QLoRA run only
    poll_inputs, poll_outputs = [watched, run_pick, view.log_scale, view.smoothing], [*view.outputs, history, details, *run_buttons]

    seen = gr.State(None)  # what this browser was last sent (refresh.changed_parts)
    # a refresh at once, which also wakes the timer while the run trains or merges (see on_tick)
    wake = {"fn": rh.on_tick, "inputs": [*poll_inputs, seen], "outputs": [*poll_outputs, seen, timer], **QUIET, "api_visibility": "private"}
    # "minimal": a refused Start is said in a toast; gradio's full status would cover the Run picker with a big "Error"
    started = f.start.click(fh.on_start, [owner, *inputs], [watched, run_pick], api_name="start_training", show_progress="minimal", **JOBS)
    started.then(**wake)
    # a refused Start: the data check's reason beside the data field too (the toast goes); a started run clears it
    started.failure(fh.on_data_note, inputs, [f.data_note], **QUIET, api_visibility="private")
    started.success(lambda: "", None, [f.data_note], queue=False, api_visibility="private")
    f.stop.click(rh.on_stop, [watched, owner], None, api_name="stop_training")
    act.resume.click(rh.on_resume, [run_pick, owner], [watched], api_name="resume_training", **JOBS).then(**wake)
    banner.btn.click(rh.on_resume, [banner.offered, owner], [watched], api_name="resume_interrupted", **JOBS).then(
        rh.on_offer, None, banner.outputs, **QUIET).then(**wake)
    act.delete.click(rh.on_delete, [run_pick, owner], [watched, run_pick, history], api_name="delete_run")
    act.retry.click(rh.on_retry, [run_pick, owner], [watched, run_pick], api_name="retry_oom", show_progress="minimal", **JOBS).then(**wake)
    more.inspect_btn.click(fh.on_inspect, inputs, more.inspect_out, api_name="inspect_data").success(
        fh.on_checked, [more.inspect_out[3]], more.inspect_out[1:], **QUIET, api_visibility="private")

    def watch(n):  # any visitor may watch a run (engine/run_access.py)
        run_access.check_run_access(jobs.runs_dir, n, None, "watch", plain=True, owner_only=jobs.owner_only)
        return n

    run_pick.input(ui_errors(watch), [run_pick], [watched], queue=False).then(**wake)
    run_pick.change(rh.on_pick, [run_pick], [details, exp.gguf_note, *run_buttons], **QUIET, api_visibility="private")
    history.select(rh.on_history_select, None, [watched, run_pick], **QUIET, api_visibility="private").then(**wake)
    exp.zip_btn.click(rh.on_zip, [run_pick, owner], [exp.download], api_name="download_run")
    exp.merge_btn.click(rh.on_merge, [run_pick, owner], None, api_name="merge_adapter", **GPU).then(**wake)
    exp.gguf_btn.click(rh.on_gguf, [run_pick, exp.gguf_type, owner], [exp.download, exp.gguf_note], api_name="export_gguf", **GPU)
    more.show_cmd.click(fh.on_show_cmd, inputs, [more.command], api_name="show_command")
    more.preset_btn.click(fh.on_preset, [more.preset, *inputs], [more.preset_note, *form.values()], api_name="apply_preset").then(
        fh.on_predict, [card, owner, *inputs], [f.prediction], **QUIET)
    timer.tick(rh.on_tick, [*poll_inputs, seen], [*poll_outputs, seen, timer], **QUIET).then(None, None, None, js=FOLLOW_LOG_JS, queue=False,
                                                                                           api_visibility="private")
    view.log_scale.input(rh.on_poll, poll_inputs, poll_outputs, **QUIET, api_visibility="private")
    view.smoothing.release(rh.on_poll, poll_inputs, poll_outputs, **QUIET, api_visibility="private")
    form["method"].change(on_method_shown, [form["method"]], [form["method"], *method_only], **QUIET, api_visibility="private")
    form["method"].input(on_method_picked, [form["method"], owner], [form[n] for n in measured], **QUIET, api_visibility="private")
    # offline: a Hub base model shows the way to the built-in one (the prediction above says why)
    form["base_model"].change(lambda m: gr.update(visible=offline.needs_internet_now(m)), [form["base_model"]], [f.use_builtin], **QUIET,
                              api_visibility="private")
    f.use_builtin.click(lambda: gr.update(value=offline.OFFLINE_MODEL), None, [form["base_model"]], **QUIET, api_visibility="private")
    for comp in [*form.values(), card]:
        comp.change(fh.on_predict, [card, owner, *inputs], [f.prediction], **QUIET)

    def run_status(name: str, request: gr.Request) -> str:
        """A run's state, progress and (while it waits in line) its place and expected wait, in the visitor's language."""
        run_access.check_run_access(jobs.runs_dir, name, None, "watch", plain=True, owner_only=jobs.owner_only)
        return run_view.status_md(jobs.status(name), lang_of(request))

    gr.api(ui_errors(run_status), api_name="run_status")
    wire_mix(mix, jobs, owner, watched, run_pick, wake)
    return {"form": form, "watched": watched, "run_pick": run_pick, "history": history, "on_load": rh.on_load, "init_owner": rh.init_owner,
            "owner": owner, "predict": fh.on_predict, "form_inputs": inputs, "predict_inputs": [card, owner, *inputs], "prediction": f.prediction, "card": card,
            "offer": rh.on_offer, "offer_outputs": banner.outputs, "try_btn": act.try_btn, "try_run": run_pick, "wake": wake}
