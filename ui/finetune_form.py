"""Panel 2, the fine-tune form: the settings people choose first, the details in closed accordions, and the form's
handlers (predict memory, start, data check, presets, the command that reproduces a run). The form is generated from
TrainConfig; its logic is engine/views/finetune_form.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from engine import run_access, sharing
from engine.config import TrainConfig
from engine.estimator import recipes
from engine.refs import visitor_scope
from engine.training.jobs import JobManager
from engine.views import choices, finetune_form, offline, run_view, space_view
from ui.errors import ui_errors
from ui.language import T, info, lang_of, tr, warning
from ui.session import session_key, uploads_of
from ui.widgets import form_update, make_inputs


def finetune_settings(jobs: JobManager) -> SimpleNamespace:
    """The top of the panel, what a person chooses first: model, method, data (a built-in set or an upload), how long;
    then the live memory prediction and Start/Stop, always in view (the details are in finetune_details' accordions)."""
    models = choices.train_model_choices(jobs, runs=False)  # the runs come for each session when it loads the page
    datasets = [(T(key), ref) for key, ref in choices.dataset_choices()]  # human names; a typed hub:owner/name is accepted too
    values, top = finetune_form.FT_DEFAULTS, finetune_form.FT_TOP
    with gr.Row():  # side by side on a wide screen, so that Start stays in the first screen; stacked on a phone
        comps = make_inputs(TrainConfig, only=top[:3], values=values, suggest={"base_model": models, "teacher_model": models})
    with gr.Row():
        comps.update(make_inputs(TrainConfig, only=["dataset"], values=values, suggest={"dataset": datasets}))
        comps["dataset"].scale = 3  # the names need the room; the upload box beside it stays small
        upload = gr.File(label=T("finetune.form.upload"), file_types=finetune_form.DATA_FILE_TYPES, height=150, scale=2, elem_id="finetune-upload")
    data_note = gr.Markdown(elem_id="finetune-data-note")  # why Start refused the data, beside the data field (empty otherwise)
    with gr.Row():  # before how long to train: Start stays in the first screen at 1440x900, in both languages
        start = gr.Button(T("finetune.start"), variant="primary", elem_id="finetune-start")
        stop = gr.Button(T("finetune.stop"), variant="stop", elem_id="finetune-stop")
    with gr.Row():
        comps.update(make_inputs(TrainConfig, only=top[4:], values=values))
    prediction = gr.Markdown(elem_id="finetune-prediction")  # what the run will need, right under the button that starts it
    # offline, a Hub base model: the built-in compact model in one click (shown only then; engine/views/offline.py)
    use_builtin = gr.Button(T("hub_offline.use_builtin"), size="sm", visible=offline.needs_internet_now(values["base_model"]),
                            elem_id="finetune-use-builtin")
    note = "space.one_run_queue" if jobs.queue else "finetune.one_run_shared" if jobs.owner_only else "finetune.one_run_local"
    gr.Markdown(T(note), elem_classes=["finetune-note"])
    return SimpleNamespace(comps=comps, upload=upload, data_note=data_note, prediction=prediction, start=start, stop=stop, use_builtin=use_builtin)


def finetune_details() -> SimpleNamespace:
    """The details on demand, in closed accordions: the hardware preset, data options and the data check, the usual
    training settings, optimizer details, LoRA internals, run and logging details, and the command that reproduces it."""
    values = finetune_form.FT_DEFAULTS
    with gr.Accordion(T("finetune.acc.preset"), open=False):
        with gr.Row(equal_height=True):  # hardware presets: engine/estimator/recipes.py adapts the tier's recipe to the model
            preset = gr.Dropdown(choices=recipes.tier_choices(), value=recipes.AUTO, label=T("finetune.preset.label"), scale=3,
                                 info=T("finetune.preset.info"))
            preset_btn = gr.Button(T("finetune.preset.apply"), scale=1)
        preset_note = gr.Markdown(elem_id="finetune-preset-note")
    with gr.Accordion(T("finetune.acc.data"), open=False):
        comps = make_inputs(TrainConfig, only=finetune_form.FT_DATA, values=values)
        eval_upload = gr.File(label=T("finetune.form.eval_upload"), file_types=finetune_form.DATA_FILE_TYPES)
    with gr.Accordion(T("finetune.acc.check"), open=False):
        inspect_btn = gr.Button(T("finetune.check.button"), size="sm")
        # the tables appear with the check's results, their headers in the visitor's language (gradio shows a gr.I18n
        # header as its raw key, so the headers are plain text made by the server: engine/views/finetune_form.py)
        inspect_out = [gr.Markdown(elem_id="finetune-check-summary"),
                       gr.Dataframe(headers=finetune_form.check_headers(finetune_form.CHECK_COLUMNS), interactive=False, wrap=True,
                                    label=T("finetune.check.first_rows"), visible=False, elem_id="finetune-check-rows"),
                       gr.BarPlot(x="tokens", y="rows", label=T("finetune.check.lengths_title"), height=200, sort=None, visible=False),
                       gr.Dataframe(headers=finetune_form.check_headers(finetune_form.DROPPED_COLUMNS), interactive=False,
                                    label=T("finetune.check.dropped_rows"), visible=False, elem_id="finetune-check-dropped")]
    with gr.Accordion(T("finetune.acc.training"), open=False):
        comps.update(make_inputs(TrainConfig, only=finetune_form.FT_TRAINING, values=values))
    with gr.Accordion(T("finetune.acc.optimizer"), open=False):
        comps.update(make_inputs(TrainConfig, only=finetune_form.FT_OPTIMIZER, values=values))
    with gr.Accordion(T("finetune.acc.lora"), open=False):
        comps.update(make_inputs(TrainConfig, only=finetune_form.FT_LORA, values=values))
    with gr.Accordion(T("finetune.acc.run"), open=False):
        comps.update(make_inputs(TrainConfig, only=finetune_form.FT_RUN, values=values))
        comps["trust_remote_code"].visible = not sharing.is_shared()  # refused on a shared app (engine/sharing.py)
    with gr.Accordion(T("finetune.acc.command"), open=False):
        show_cmd = gr.Button(T("finetune.command.button"), size="sm")
        command = gr.Code(label=T("finetune.command.label"), language="yaml", visible=False)
    return SimpleNamespace(comps=comps, preset=preset, preset_btn=preset_btn, preset_note=preset_note, eval_upload=eval_upload,
                           inspect_btn=inspect_btn, inspect_out=inspect_out, show_cmd=show_cmd, command=command)


def form_handlers(jobs: JobManager, upload_dir: Path, allow_local_models: bool, form: dict[str, Any]) -> SimpleNamespace:
    """Handlers of the fine-tune form; each takes (dataset upload, *form values, eval upload) as the form's inputs."""
    names = list(form)  # the form's widgets by field name, in the API's order

    def gate(values: dict[str, Any]) -> None:  # a run as the base or the teacher: asked of the run gate (engine/run_access.py)
        for field, action in (("base_model", "estimate"), ("teacher_model", "teacher")):
            run_access.check_run_access(jobs.runs_dir, values.get(field), None, action, owner_only=jobs.owner_only)

    def config_of(request: gr.Request | None, upload_path: str | None, *vals: Any) -> TrainConfig:
        *vals, eval_path = vals  # the eval upload comes last (the form's inputs)
        gate(dict(zip(names, vals, strict=True)))
        # uploads go to (and the form may only name files in) this session's own upload folder
        return finetune_form.train_config_from_form(dict(zip(names, vals, strict=True)), upload_path, eval_path, upload_dir=uploads_of(upload_dir, request),
                                                    runs_dir=jobs.runs_dir, allow_local_models=allow_local_models)

    def on_predict(request: gr.Request, card, owner_v, upload_path, *vals):  # card: the estimator's planned card (a gr.State), None before a hand-off
        return finetune_form.prediction_or_warning(lambda: config_of(request, upload_path, *vals), jobs.runs_dir, lang_of(request), card, jobs=jobs,
                                                   owner=session_key(owner_v, request))

    @ui_errors
    def on_start(request: gr.Request, owner_v, upload_path, *vals):
        cfg = config_of(request, upload_path, *vals)
        finetune_form.check_reachable(cfg)  # offline and a Hub model: say so now, not after a failed start
        if finetune_form.memory_prediction(cfg, jobs.runs_dir)[1] == "no":
            warning(tr("finetune.msg.will_not_fit"))
        with visitor_scope(uploads_of(upload_dir, request)):  # the engine's gate checks this session's folder too (engine/refs.py)
            name = jobs.start(cfg, owner=session_key(owner_v, request))
        info(space_view.started_md(jobs, name, lang_of(request)))  # started, or its number in the waiting line
        return name, gr.update(choices=run_view.run_choices(jobs), value=name)

    def on_data_note(request: gr.Request, upload_path, *vals):  # after a refused Start: the data check's refusal beside the data field
        return finetune_form.data_refusal(lambda: config_of(request, upload_path, *vals), lang_of(request))

    @ui_errors
    def on_inspect(request: gr.Request, upload_path, *vals):
        return finetune_form.data_check(config_of(request, upload_path, *vals), jobs.runs_dir, lang_of(request))

    def on_checked(dropped):  # after a check: its tables in view (the dropped rows' only when there are some)
        return gr.update(visible=True), gr.update(visible=True), gr.update(visible=dropped is not None and len(dropped) > 0)

    @ui_errors
    def on_preset(tier, upload_path, *vals):
        gate(dict(zip(names, vals[:-1], strict=True)))
        note, values = finetune_form.preset_values(dict(zip(names, vals[:-1], strict=True)), tier)  # the eval upload comes last
        return [note, *[form_update(form[n], values[n]) if n in values else gr.skip() for n in names]]

    @ui_errors
    def on_show_cmd(request: gr.Request, upload_path, *vals):
        return gr.update(value=finetune_form.reproduce_command(config_of(request, upload_path, *vals), lang_of(request)), visible=True)

    return SimpleNamespace(on_predict=on_predict, on_start=on_start, on_data_note=on_data_note, on_inspect=on_inspect, on_checked=on_checked,
                           on_preset=on_preset, on_show_cmd=on_show_cmd)
