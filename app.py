"""Compact LLM Lab: the single gr.Blocks page (memory estimator, fine-tune, playground).

Thin by design: one builder per panel and, under it, one per part of the panel; each handler turns form values
into a config dataclass (engine/config.py), makes one engine call, and maps the result onto components. What the
page shows (status text, progress HTML, tables, choice lists) is built without gradio in engine/views/. Form
widgets are generated from the dataclass fields (their help text, bounds and choices live there, once). Long work
never runs here: training is a subprocess (engine/training/jobs.py) polled with gr.Timer; generation streams from
a worker thread (engine/inference/generate.py).

Run: `python app.py [--share] [--port N] [--runs-dir DIR] [--auth USER:PASSWORD] [--mcp]`. On a shared app (a public
link, Colab, a Space, a non-loopback address: engine/sharing.py) every run and file belongs to the session that made it,
and visitors never run remote code or use the server's Hugging Face token (docs/security.md).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import logging
import os
import secrets
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from engine import i18n, sharing
from engine.config import GenerationSettings, GgufSettings, MemoryQuery, QuantSettings, TrainConfig
from engine.data.files import MAX_FILE_BYTES
from engine.errors import EngineError
from engine.estimator import memory, recipes
from engine.estimator.handoff import check_ui_estimator_model
from engine.fields import field_specs, from_flat
from engine.refs import default_runs_dir
from engine.training.jobs import JobManager
from engine.views import choices, estimate_view, finetune_form, playground, playground_load, run_charts, run_control, run_history, run_view
from engine.views.signals import StopSignals
from engine.views.uploads import keep_upload, session_dir, sweep_uploads

GPU = {"concurrency_limit": 1, "concurrency_id": "gpu"}  # one generation, evaluation, export or merge at a time
JOBS = {"concurrency_limit": 1, "concurrency_id": "jobs"}  # one start, resume or retry of a training run at a time
QUIET = {"queue": False, "show_progress": "hidden"}  # instant updates as the form changes
ESTIMATE = {"concurrency_limit": 2, "concurrency_id": "estimate"}  # the estimator's architecture work, queued (a shared app's visitors take turns)

# ---- Languages: static texts translated in the browser, server-built texts in the visitor's language ----------------

I18N = gr.I18n(**i18n.translations())
T = I18N  # T("finetune.start"): a static text, translated by the browser (presets/lang/*.yaml)

# The language: the browser's (gradio's gr.I18n follows navigator.language) unless the page's switch chose one (kept in
# local storage, applied at load through gradio's own changeLocale). A cookie tells the server (lang_of), so texts built
# there (statuses, tables, errors) come in the same language.
LANG_HEAD = """<script>
(() => {
  let l = null;
  try { l = localStorage.getItem("%(cookie)s"); } catch (e) {}
  const eff = (l || navigator.language || "en").toLowerCase().startsWith("pt") ? "pt-BR" : "en";
  document.cookie = "%(cookie)s=" + eff + "; path=/; max-age=31536000; SameSite=Lax";
  window.labSetLocale = async (lang) => {
    const url = performance.getEntriesByType("resource").map((e) => e.name).find((n) => /\/assets\/core-[^/]*\.js$/.test(n));
    if (url) { try { (await import(url)).changeLocale(lang); } catch (e) {} }
  };
  if (l) window.labSetLocale(l);  // gradio runs this head before it mounts the page: labels come in the chosen language
})();
</script>""" % {"cookie": i18n.COOKIE}
LANG_SWITCH_JS = """(l) => {
  try { localStorage.setItem("%(cookie)s", l); } catch (e) {}
  document.cookie = "%(cookie)s=" + l + "; path=/; max-age=31536000; SameSite=Lax";
  location.reload();
  return l;
}""" % {"cookie": i18n.COOKIE}
LANG_NOW_JS = """async () => {
  let saved = null;
  try { saved = localStorage.getItem("%(cookie)s"); } catch (e) {}
  if (saved && window.labSetLocale) await window.labSetLocale(saved);
  const l = saved || navigator.language || "en";
  return l.toLowerCase().startsWith("pt") ? "pt-BR" : "en";
}""" % {"cookie": i18n.COOKIE}


def lang_of(request: gr.Request | None = None) -> str:
    """The visitor's language ("en" or "pt-BR"): the page's language cookie, else the browser's Accept-Language. Without
    a request argument, the one of the event being handled (gradio keeps it in a context variable)."""
    if request is None:
        from gradio.context import LocalContext

        request = LocalContext.request.get(None)
    return i18n.lang_from_headers(getattr(request, "headers", None))


def tr(key: str, /, **params: Any) -> str:
    """A server-built text in the visitor's language (status lines, messages, table headers)."""
    return i18n.t(key, lang_of(), **params)


def launch_options() -> dict[str, Any]:
    """What demo.launch needs besides the address (app.main and the tests): languages, theme, page head and style."""
    return {"i18n": I18N, "theme": gr.themes.Soft(), "head": LANG_HEAD, "css": CSS}


CSS = ""


def language_switch() -> gr.Radio:
    """Português | English, at the top of the page: reloads the page in the chosen language (kept in the browser)."""
    switch = gr.Radio(choices=[("Português", "pt-BR"), ("English", "en")], value=None, label=T("app.language"), show_label=False,
                      container=False, elem_id="lang-switch")
    switch.input(None, [switch], [switch], js=LANG_SWITCH_JS)
    return switch


# ---- Widgets generated from the config dataclasses -----------------------------------------------

def named(comp: gr.components.Component, field: str) -> gr.components.Component:
    """A gr.Number, gr.Slider or gr.Dropdown whose wrong API values (text for a number, a value outside the choices...)
    are refused with a message naming the field; gradio's own says only "input component at index N" or "Value: X is
    not in the list of choices". (The instance's preprocess is wrapped: a subclass of a gradio component would make
    gradio write a .pyi stub beside this file.)"""
    original = comp.preprocess
    if isinstance(comp, gr.Dropdown):
        allowed = "one of " + ", ".join(repr(c[1] if isinstance(c, tuple) else c) for c in (comp.choices or []))
    else:
        allowed = f"a number from {comp.minimum:g} to {comp.maximum:g}" if isinstance(comp, gr.Slider) else "a number"

    def preprocess(payload: Any) -> Any:
        try:
            return original(payload)
        except (TypeError, ValueError, OverflowError, gr.Error):
            raise gr.Error(f"{field} = {payload!r} is not allowed: {allowed}.") from None

    comp.preprocess = preprocess
    return comp


def make_inputs(cls: type, *, only: list[str] | None = None, skip: tuple[str, ...] = (), values: dict[str, Any] | None = None,
                suggest: dict[str, list[str]] | None = None) -> dict[str, gr.components.Component]:
    """One typed, bounded widget per dataclass field (dotted names for nested fields). `suggest`: text fields shown as a
    dropdown of suggestions that still accepts any typed value (e.g. model references)."""
    values, suggest = values or {}, suggest or {}
    comps: dict[str, gr.components.Component] = {}
    specs = {s.name: s for s in field_specs(cls)}
    for name in only or list(specs):
        if name in skip:
            continue
        spec = specs[name]
        value = values.get(name, spec.default)
        key = f"field.{cls.__name__}.{name}"
        common = {"label": T(f"{key}.label"), "info": T(f"{key}.help"), "value": value, "elem_id": f"{cls.__name__}-{name}".replace(".", "-")}
        if name in suggest:
            comps[name] = gr.Dropdown(choices=suggest[name], allow_custom_value=True, **common)
        elif spec.type is bool:
            comps[name] = gr.Checkbox(**common)
        elif spec.choices:
            comps[name] = named(gr.Dropdown(choices=list(spec.choices), **common), name)
        elif spec.type in (int, float) and spec.min is not None and spec.max is not None and spec.step and (spec.max - spec.min) / spec.step <= 5000:
            comps[name] = named(gr.Slider(minimum=spec.min, maximum=spec.max, step=spec.step, **common), name)
        elif spec.type in (int, float):
            # No gradio-side bounds: the dataclass validates, with a message that names the field.
            comps[name] = named(gr.Number(precision=0 if spec.type is int else None, **common), name)
        else:
            comps[name] = gr.Textbox(**common)
    return comps


def ui_errors(fn):
    """Engine errors become a readable gr.Error in the browser, never a traceback or a dead server (generators too); an
    unexpected error becomes a plain message naming its kind (the details go to the server's log only)."""

    def unexpected(exc: Exception) -> gr.Error:
        logging.getLogger("app").exception("unexpected error in %s", fn.__name__)
        return gr.Error(tr("message.unexpected", kind=type(exc).__name__, where=fn.__name__.removeprefix("on_")))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EngineError as exc:
            raise gr.Error(exc.render(lang_of())) from None
        except gr.Error:
            raise
        except Exception as exc:  # noqa: BLE001 - never a traceback (or a server path) in the browser
            raise unexpected(exc) from None

    @functools.wraps(fn)
    def gen_wrapper(*args, **kwargs):
        try:
            yield from fn(*args, **kwargs)
        except EngineError as exc:
            raise gr.Error(exc.render(lang_of())) from None
        except gr.Error:
            raise
        except Exception as exc:  # noqa: BLE001 - as above
            raise unexpected(exc) from None

    return gen_wrapper if inspect.isgeneratorfunction(fn) else wrapper


def session_key(owner_v: str | None, request: gr.Request | None) -> str | None:
    """Who is acting: the browser's key (kept in its local storage), else the gradio session of an API caller, so that a
    run started through the API belongs to that caller's session and never to everyone."""
    if owner_v:
        return str(owner_v)
    session = getattr(request, "session_hash", None)
    return f"session:{session}" if session else None


def uploads_of(upload_dir: Path, request: gr.Request | None) -> Path:
    """This session's upload folder (engine/views/uploads.py): a form may only name files in it."""
    return session_dir(upload_dir, getattr(request, "session_hash", None))


# ---- Panel 1: memory estimator -------------------------------------------------------------------

def estimator_form() -> SimpleNamespace:
    """The model (a choice, an uploaded config.json or a described architecture), the job's settings and the card."""
    model = gr.Dropdown(choices=memory.model_choices(), value="builtin:compact-mini", allow_custom_value=True, label="Model",
                        info="A built-in or catalog model, or type any Hugging Face id (its config.json is fetched when online).")
    with gr.Accordion("…or upload a config.json / describe the architecture", open=False):
        config_file = gr.File(label="config.json", file_types=[".json"])
        with gr.Row():
            layers, hidden = named(gr.Number(value=32, precision=0, label="Layers"), "layers"), named(gr.Number(value=4096, precision=0, label="Hidden size"), "hidden")
            heads, kv = named(gr.Number(value=32, precision=0, label="Attention heads"), "heads"), named(gr.Number(value=8, precision=0, label="KV heads"), "kv_heads")
        with gr.Row():
            inter, vocab = named(gr.Number(value=14336, precision=0, label="MLP intermediate"), "intermediate"), named(gr.Number(value=128256, precision=0, label="Vocabulary"), "vocab")
            tied = gr.Checkbox(value=False, label="Tied embeddings")
        manual_btn = gr.Button("Use this architecture (Llama-style)", size="sm")
    form = make_inputs(MemoryQuery, skip=("model",))
    tier_names = [t.name for t in memory.hardware_tiers()]
    tier = gr.Dropdown(choices=tier_names, value="t4-16gb" if "t4-16gb" in tier_names else tier_names[0], label="Your card",
                       info="Used for the largest batch / sequence that fit and for 'make it fit'.")
    return SimpleNamespace(model=model, config_file=config_file, manual=[layers, hidden, heads, kv, inter, vocab, tied], manual_btn=manual_btn,
                           form=form, tier=tier)


def estimator_results() -> SimpleNamespace:
    """Totals, breakdown chart and table, verdict per card, limits, make-it-fit suggestions and the copy to Fine-tune."""
    totals = gr.Markdown()
    chart = gr.BarPlot(x="job", y="GiB", color="term", title="Memory breakdown", height=260, show_label=False)
    breakdown = gr.Dataframe(headers=["term", "GiB", "what it is"], interactive=False, label="Breakdown", wrap=True)
    tiers = gr.Dataframe(headers=["card", "usable GiB", "verdict"], interactive=False, label="Verdict per card")
    limits = gr.Markdown()
    fit = gr.Dataframe(headers=["#", "change", "new total GiB", "cost"], interactive=False, label="Make it fit (cheapest first)")
    with gr.Row():
        pick, copy_btn = gr.Number(value=1, precision=0, minimum=1, label="Suggestion #", scale=1), gr.Button("Use these settings in Fine-tune", scale=2)
    with gr.Accordion("Your runs: predicted vs measured peak on this machine", open=False):
        runs_md = gr.Markdown()
        runs_plot = gr.ScatterPlot(x="predicted GiB", y="measured GiB", color="device", tooltip=["run", "error %"], height=240,
                                   title="Predicted vs measured peak (GiB)", show_label=False)
    return SimpleNamespace(outputs=[totals, chart, breakdown, tiers, limits, fit, runs_md, runs_plot], pick=pick, copy_btn=copy_btn)


def build_estimator(upload_dir: Path, jobs: JobManager) -> dict[str, Any]:
    gr.Markdown("Will it fit? Pick a model and a job; the breakdown and the verdict per card update as you change settings.")
    with gr.Row():
        with gr.Column(scale=2):
            f = estimator_form()
        with gr.Column(scale=3):
            r = estimator_results()
    inputs = [f.model, f.tier, *f.form.values()]
    names = list(f.form)

    def query_of(model_v: str, *vals: Any) -> MemoryQuery:
        return from_flat(MemoryQuery, {"model": model_v, **dict(zip(names, vals, strict=True))})

    def on_estimate(model_v: str, tier_v: str, *vals: Any):
        return estimate_view.estimate_or_warning(lambda: query_of(check_ui_estimator_model(model_v, upload_dir), *vals), tier_v,
                                                 runs_dir=jobs.runs_dir, shared=jobs.owner_only)

    for comp in inputs:  # queued: building an architecture on the meta device is CPU work (two at a time, the latest value wins)
        comp.change(on_estimate, inputs, r.outputs, show_progress="hidden", trigger_mode="always_last", **ESTIMATE)

    @ui_errors
    def on_manual(layers, hidden, heads, kv, inter, vocab, tied):
        return gr.update(value=memory.arch_from_manual(layers, hidden, heads, kv, inter, vocab, tied).ref)

    @ui_errors
    def on_config_upload(path, request: gr.Request):
        return gr.update(value=str(keep_upload(path, uploads_of(upload_dir, request), suffixes=[".json"], max_bytes=2**20))) if path else gr.skip()

    f.manual_btn.click(on_manual, f.manual, [f.model], api_name="manual_architecture")
    f.config_file.upload(on_config_upload, [f.config_file], [f.model])
    return {"inputs": inputs, "query_of": query_of, "copy_btn": r.copy_btn, "pick": r.pick, "outputs": r.outputs, "on_estimate": on_estimate}


# ---- Panel 2: fine-tune --------------------------------------------------------------------------

def finetune_settings(jobs: JobManager) -> SimpleNamespace:
    """The top of the panel, what a person chooses first: model, method, data (a built-in set or an upload), how long;
    then the live memory prediction and Start/Stop, always in view (the details are in finetune_details' accordions)."""
    models = choices.train_model_choices(jobs)
    datasets = [(T(key), ref) for key, ref in choices.dataset_choices()]  # human names; a typed hub:owner/name is accepted too
    values, top = finetune_form.FT_DEFAULTS, finetune_form.FT_TOP
    with gr.Row():  # side by side on a wide screen, so that Start stays in the first screen; stacked on a phone
        comps = make_inputs(TrainConfig, only=top[:3], values=values, suggest={"base_model": models, "teacher_model": models})
    with gr.Row():
        comps.update(make_inputs(TrainConfig, only=["dataset"], values=values, suggest={"dataset": datasets}))
        comps["dataset"].scale = 3  # the names need the room; the upload box beside it stays small
        upload = gr.File(label=T("finetune.form.upload"), file_types=finetune_form.DATA_FILE_TYPES, height=150, scale=2, elem_id="finetune-upload")
    with gr.Row():
        comps.update(make_inputs(TrainConfig, only=top[4:], values=values))
    with gr.Row():
        start = gr.Button(T("finetune.start"), variant="primary", elem_id="finetune-start")
        stop = gr.Button(T("finetune.stop"), variant="stop", elem_id="finetune-stop")
    prediction = gr.Markdown(elem_id="finetune-prediction")  # what the run will need, right under the button that starts it
    gr.Markdown(T("finetune.one_run_shared") if jobs.owner_only else T("finetune.one_run_local"), elem_classes=["finetune-note"])
    return SimpleNamespace(comps=comps, upload=upload, prediction=prediction, start=start, stop=stop)


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
        inspect_out = [gr.Markdown(),
                       gr.Dataframe(headers=[T(f"finetune.check.col.{c}") for c in finetune_form.CHECK_COLUMNS], interactive=False, wrap=True,
                                    label=T("finetune.check.first_rows")),
                       gr.BarPlot(x="tokens", y="rows", label=T("finetune.check.lengths_title"), height=200, sort=None),
                       gr.Dataframe(headers=[T(f"finetune.check.col.{c}") for c in finetune_form.DROPPED_COLUMNS], interactive=False,
                                    label=T("finetune.check.dropped_rows"))]
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
        run_pick = gr.Dropdown(choices=run_view.run_choices(jobs), label=T("finetune.actions.run"), info=T("finetune.actions.run_info"), scale=3,
                               elem_id="finetune-run-pick")
        with gr.Column(scale=2, min_width=160):
            try_btn = gr.Button(T("finetune.actions.try"), variant="primary", visible=False, elem_id="finetune-try")
    with gr.Row():
        resume = gr.Button(T("finetune.actions.resume"), size="sm")
        retry = gr.Button(T("finetune.actions.retry"), size="sm")
        delete = gr.Button(T("finetune.actions.delete"), size="sm", variant="stop")
    return SimpleNamespace(run_pick=run_pick, try_btn=try_btn, resume=resume, retry=retry, delete=delete)


def run_exports() -> SimpleNamespace:
    """Download the picked run, merge its adapter, export it to GGUF (behind a closed accordion)."""
    with gr.Accordion(T("finetune.export.title"), open=False):
        with gr.Row():
            zip_btn, merge_btn = gr.Button(T("finetune.export.zip"), size="sm"), gr.Button(T("finetune.export.merge"), size="sm")
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


def form_handlers(jobs: JobManager, upload_dir: Path, allow_local_models: bool, names: list[str]) -> SimpleNamespace:
    """Handlers of the fine-tune form; each takes (dataset upload, *form values, eval upload) as the form's inputs."""

    def config_of(request: gr.Request | None, upload_path: str | None, *vals: Any) -> TrainConfig:
        *vals, eval_path = vals  # the eval upload comes last (the form's inputs)
        # uploads go to (and the form may only name files in) this session's own upload folder
        return finetune_form.train_config_from_form(dict(zip(names, vals, strict=True)), upload_path, eval_path, upload_dir=uploads_of(upload_dir, request),
                                                    runs_dir=jobs.runs_dir, allow_local_models=allow_local_models)

    def on_predict(request: gr.Request, upload_path, *vals):
        return finetune_form.prediction_or_warning(lambda: config_of(request, upload_path, *vals), jobs.runs_dir, lang_of(request))

    @ui_errors
    def on_start(request: gr.Request, owner_v, upload_path, *vals):
        cfg = config_of(request, upload_path, *vals)
        if finetune_form.memory_prediction(cfg, jobs.runs_dir)[1] == "no":
            gr.Warning(tr("finetune.msg.will_not_fit"))
        name = jobs.start(cfg, owner=session_key(owner_v, request))
        gr.Info(tr("finetune.msg.started", name=name))
        return name, gr.update(choices=run_view.run_choices(jobs), value=name)

    @ui_errors
    def on_inspect(request: gr.Request, upload_path, *vals):
        return finetune_form.data_check(config_of(request, upload_path, *vals), jobs.runs_dir, lang_of(request))

    @ui_errors
    def on_preset(tier, upload_path, *vals):
        note, values = finetune_form.preset_values(dict(zip(names, vals[:-1], strict=True)), tier)  # the eval upload comes last
        return [note, *[gr.update(value=values[n]) if n in values else gr.skip() for n in names]]

    @ui_errors
    def on_show_cmd(request: gr.Request, upload_path, *vals):
        return gr.update(value=finetune_form.reproduce_command(config_of(request, upload_path, *vals), lang_of(request)), visible=True)

    return SimpleNamespace(on_predict=on_predict, on_start=on_start, on_inspect=on_inspect, on_preset=on_preset, on_show_cmd=on_show_cmd)


def run_handlers(jobs: JobManager) -> SimpleNamespace:
    """Handlers of the run view (the run watched on load, the timer's refresh), this browser's key and the run actions;
    controlling a run checks that key (owner_v). Texts come in the visitor's language."""

    def on_load(request: gr.Request):
        name, runs = run_view.opening_run(jobs)
        models = gr.update(choices=choices.train_model_choices(jobs))  # runs finished since the page was built
        return name, gr.update(choices=runs, value=name), run_history.history_table(jobs, lang_of(request)), models, models

    def init_owner(key):  # a new browser gets a random key, kept in its local storage
        return (key or secrets.token_urlsafe(18),) * 2

    def on_poll(name, pick, log_scale, smoothing, request: gr.Request):
        lang = lang_of(request)
        w = run_view.watched_outputs(jobs, name, lang, log_scale=bool(log_scale), smoothing=float(smoothing or 0))
        if w is None:
            return (gr.skip(),) * 8 + (gr.update(visible=run_view.can_try_run(jobs, pick)),)
        plot = gr.update(value=w.plot, title=tr("finetune.plot.title"), x_title=tr("finetune.plot.x"), y_title=run_charts.y_title(bool(log_scale), lang),
                         color_title=tr("finetune.plot.series"))
        if pick == name:
            can, details = w.can_try, w.details
        else:  # the picked run is not the watched one (a resumed interrupted run is watched): its own facts
            can, details = run_view.can_try_run(jobs, pick), run_history.selected_details(jobs, pick, lang)
        return w.status, w.progress, plot, w.task, w.log, w.raw_log, w.history, details, gr.update(visible=can)

    def on_pick(name, request: gr.Request):  # the picked run: its details, its GGUF note and whether it can be tried
        lang = lang_of(request)
        return (run_history.selected_details(jobs, name, lang), run_control.gguf_note(jobs, name, lang),
                gr.update(visible=run_view.can_try_run(jobs, name)))

    def on_history_select(evt: gr.SelectData):  # a row of the history: watch and pick that run
        name = (evt.row_value or [None])[0] if isinstance(evt.row_value, list) else None
        return (name, gr.update(value=name)) if name else (gr.skip(), gr.skip())

    @ui_errors
    def on_stop(name, owner_v, request: gr.Request):
        gr.Info(run_control.stop_run(jobs, name, session_key(owner_v, request), lang_of(request)))

    @ui_errors
    def on_resume(name, owner_v, request: gr.Request):
        gr.Info(run_control.resume_run(jobs, name, session_key(owner_v, request), lang_of(request)))
        return name

    @ui_errors
    def on_retry(name, owner_v, request: gr.Request):
        new, message = run_control.retry_run(jobs, name, session_key(owner_v, request), lang_of(request))
        gr.Info(message)
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
        gr.Info(run_control.merge_finished_run(jobs, name, session_key(owner_v, request), lang_of(request)))

    def on_offer(request: gr.Request):  # the newest interrupted run (a Colab disconnect), offered at the top of the panel
        name, text = run_view.resume_offer(jobs, lang_of(request))
        return gr.update(visible=bool(name)), text, name

    @ui_errors
    def on_gguf(name, gguf_type, owner_v, request: gr.Request):
        path, message = run_control.export_gguf_for_download(jobs, name, gguf_type, owner=session_key(owner_v, request), lang=lang_of(request))
        return gr.update(value=str(path), visible=True), message

    return SimpleNamespace(on_load=on_load, init_owner=init_owner, on_poll=on_poll, on_pick=on_pick, on_history_select=on_history_select,
                           on_stop=on_stop, on_resume=on_resume, on_retry=on_retry, on_delete=on_delete, on_zip=on_zip, on_merge=on_merge,
                           on_offer=on_offer, on_gguf=on_gguf)


def resume_banner() -> SimpleNamespace:
    """The offer to resume an interrupted run, shown at the top of the Fine-tune panel when there is one."""
    offered = gr.State(None)  # the interrupted run's name
    with gr.Row(visible=False) as row:
        text = gr.Markdown()
        btn = gr.Button(T("finetune.actions.resume"), variant="primary", scale=0, min_width=120)
    return SimpleNamespace(row=row, text=text, btn=btn, offered=offered, outputs=[row, text, offered])


def build_finetune(jobs: JobManager, upload_dir: Path, allow_local_models: bool = False) -> dict[str, Any]:
    """The Fine-tune panel. Phone-first order: the essentials and Start/Stop, then the watched run's results, then the
    closed accordions of details, the exports and the run history (a desktop shows each pair side by side)."""
    watched = gr.State(None)  # the run this browser session is watching
    owner = gr.State(None)  # this browser's key (see build_app), as a session State: it never appears in the API
    banner = resume_banner()
    with gr.Row():
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
            # five short columns on one line each (no word broken mid-word; a phone scrolls the table sideways); the rest of a
            # run's facts show on select
            history = gr.Dataframe(headers=[T(f"finetune.history.col.{c}") for c in run_history.HISTORY_COLUMNS], interactive=False,
                                   label=T("finetune.history.label"), elem_id="finetune-history")
            details = gr.Markdown(elem_id="finetune-run-details")
    comps = {**f.comps, **more.comps}
    form = {n: comps[n] for n in finetune_form.FT_MAIN + finetune_form.FT_TRAIN + finetune_form.FT_LORA + finetune_form.FT_RUN + finetune_form.FT_DATA}
    inputs = [f.upload, *form.values(), more.eval_upload]  # the API's order (form_handlers): upload, the fields, the eval upload
    run_pick = act.run_pick
    distill_only = [form[n] for n in finetune_form.DISTILL_ONLY]
    for comp in distill_only:  # shown for method 'distill' only (read when the page is built; toggled below)
        comp.visible = finetune_form.FT_DEFAULTS.get("method") == "distill"
    timer = gr.Timer(1.0)
    fh, rh = form_handlers(jobs, upload_dir, allow_local_models, list(form)), run_handlers(jobs)
    poll_inputs, poll_outputs = [watched, run_pick, view.log_scale, view.smoothing], [*view.outputs, history, details, act.try_btn]

    f.start.click(fh.on_start, [owner, *inputs], [watched, run_pick], api_name="start_training", **JOBS)
    f.stop.click(rh.on_stop, [watched, owner], None, api_name="stop_training")
    act.resume.click(rh.on_resume, [run_pick, owner], [watched], api_name="resume_training", **JOBS)
    banner.btn.click(rh.on_resume, [banner.offered, owner], [watched], api_name="resume_interrupted", **JOBS).then(
        rh.on_offer, None, banner.outputs, **QUIET)
    act.delete.click(rh.on_delete, [run_pick, owner], [watched, run_pick, history], api_name="delete_run")
    act.retry.click(rh.on_retry, [run_pick, owner], [watched, run_pick], api_name="retry_oom", **JOBS)
    more.inspect_btn.click(fh.on_inspect, inputs, more.inspect_out, api_name="inspect_data")
    run_pick.input(lambda n: n, [run_pick], [watched], queue=False)
    run_pick.change(rh.on_pick, [run_pick], [details, exp.gguf_note, act.try_btn], **QUIET, api_visibility="private")
    history.select(rh.on_history_select, None, [watched, run_pick], **QUIET, api_visibility="private")
    exp.zip_btn.click(rh.on_zip, [run_pick, owner], [exp.download], api_name="download_run")
    exp.merge_btn.click(rh.on_merge, [run_pick, owner], None, api_name="merge_adapter", **GPU)
    exp.gguf_btn.click(rh.on_gguf, [run_pick, exp.gguf_type, owner], [exp.download, exp.gguf_note], api_name="export_gguf", **GPU)
    more.show_cmd.click(fh.on_show_cmd, inputs, [more.command], api_name="show_command")
    more.preset_btn.click(fh.on_preset, [more.preset, *inputs], [more.preset_note, *form.values()], api_name="apply_preset").then(
        fh.on_predict, inputs, [f.prediction], **QUIET)
    timer.tick(rh.on_poll, poll_inputs, poll_outputs, **QUIET).then(None, None, None, js=FOLLOW_LOG_JS, queue=False, api_visibility="private")
    view.log_scale.input(rh.on_poll, poll_inputs, poll_outputs, **QUIET, api_visibility="private")
    view.smoothing.release(rh.on_poll, poll_inputs, poll_outputs, **QUIET, api_visibility="private")
    form["method"].change(lambda m: [gr.update(visible=m == "distill")] * len(distill_only), [form["method"]], distill_only, **QUIET, api_visibility="private")
    for comp in form.values():
        comp.change(fh.on_predict, inputs, [f.prediction], **QUIET)
    return {"form": form, "watched": watched, "run_pick": run_pick, "history": history, "on_load": rh.on_load, "init_owner": rh.init_owner,
            "owner": owner, "predict": fh.on_predict, "form_inputs": inputs, "prediction": f.prediction,
            "offer": rh.on_offer, "offer_outputs": banner.outputs, "try_btn": act.try_btn, "try_run": run_pick}


# ---- Panel 3: playground -------------------------------------------------------------------------

def model_settings(jobs: JobManager, models: list[str]) -> SimpleNamespace:
    """The model (with its adapter, placement and quantization), the mode, the system prompt and the decoding settings."""
    from engine.inference.presets import generation_presets

    model = gr.Dropdown(choices=models, value=models[0] if models else None, allow_custom_value=True, label="Model", elem_id="playground-model",
                        info="A pretrained built-in model, a finished run (run:NAME: adapter applied on its base; run:NAME/merged: its merged "
                             "16-bit model), or a Hugging Face id (the catalog's are listed; downloaded once, when online).")
    with gr.Row():
        # on a shared app the model cache serves every visitor: nobody may empty it (engine/views/playground_load.py)
        refresh, unload = gr.Button("Refresh model list", size="sm"), gr.Button("Unload models (free memory)", size="sm", visible=not sharing.is_shared())
    quant = gr.Dropdown(choices=[c for c in field_specs(QuantSettings)[0].choices], value="none", label="Load as", info=field_specs(QuantSettings)[0].help)
    with gr.Accordion("Adapter and placement", open=False):
        adapter = gr.Dropdown(choices=choices.adapter_choices(jobs), value=choices.NO_ADAPTER, label="Adapter", elem_id="playground-adapter",
                              allow_custom_value=True, info="A LoRA adapter from a run, applied on top of the model above without merging "
                                                            "(the model must be the adapter's base, e.g. base vs base + adapter in Compare).")
        placement = gr.Radio(choices=list(choices.PLACEMENTS), value="one device", label="Placement",
                             info="auto: accelerate spreads a model larger than the GPU over GPU, CPU RAM and disk "
                                  "(slower, but it runs). On a machine without a GPU everything is in RAM either way.")
        gpu_budget = gr.Number(value=0, minimum=0, maximum=1024, label="GPU budget for auto (GiB, 0 = all free memory)",
                               info="Cap the GPU share so the rest of the card stays free (e.g. for a training run).")
    model_info_md = gr.Markdown(elem_id="playground-model-info")
    mode = gr.Radio(choices=["chat", "completion"], value="chat", label="Mode", info="chat: the model's chat template; completion: raw text continuation.")
    system = gr.Textbox(label="System prompt (chat)", lines=2)
    presets = generation_presets()
    preset = gr.Radio(choices=list(presets), value=None, label="Decoding preset", info=" · ".join(f"{k}: {v['description']}" for k, v in presets.items()))
    gen = make_inputs(GenerationSettings)
    return SimpleNamespace(model=model, refresh=refresh, unload=unload, quant=quant, adapter=adapter, model_info=model_info_md, mode=mode,
                           system=system, preset=preset, gen=gen, load_extra=[adapter, placement, gpu_budget])  # last, so API callers may leave them out


def chat_tab() -> SimpleNamespace:
    chat = gr.Chatbot(label="Conversation", height=420, buttons=["copy"])
    prompt = gr.Textbox(label="Prompt", placeholder="Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", lines=2)
    with gr.Row():
        send, stop, regen, clear = gr.Button("Generate", variant="primary"), gr.Button("Stop"), gr.Button("Regenerate"), gr.Button("Clear")
    stats = gr.Markdown(elem_id="playground-stats")
    return SimpleNamespace(chat=chat, prompt=prompt, send=send, stop=stop, regen=regen, clear=clear, stats=stats)


def compare_tab(models: list[str]) -> SimpleNamespace:
    gr.Markdown("The same prompt, settings and seed on two models, one after the other (so only one has to fit in memory).")
    model_b = gr.Dropdown(choices=models, value=models[-1] if models else None, allow_custom_value=True, label="Model B",
                          info="Model A is the one chosen on the left.")
    prompt = gr.Textbox(label="Prompt", lines=2, placeholder="Convert the date 11/04/1999 (DD/MM/YYYY) to ISO format (YYYY-MM-DD).")
    with gr.Row():
        btn, stop = gr.Button("Compare", variant="primary"), gr.Button("Stop")
    with gr.Row():
        with gr.Column():
            out_a = gr.Textbox(label="Model A", lines=8)
            stats_a = gr.Markdown()
        with gr.Column():
            out_b = gr.Textbox(label="Model B", lines=8)
            stats_b = gr.Markdown()
    return SimpleNamespace(model_b=model_b, prompt=prompt, btn=btn, stop=stop, outputs=[out_a, stats_a, out_b, stats_b])


def batch_tab() -> SimpleNamespace:
    gr.Markdown("Many prompts, generated in memory-safe micro-batches (halved automatically after an out-of-memory).")
    text = gr.Textbox(label="Prompts, one per line", lines=6)
    file = gr.File(label="…or a .txt / .jsonl / .csv file (column prompt, instruction or text)", file_types=[".txt", ".jsonl", ".csv"])
    size = named(gr.Slider(1, 64, value=8, step=1, label="Micro batch"), "micro batch")
    with gr.Row():
        btn, stop = gr.Button("Generate all", variant="primary"), gr.Button("Stop")
    outputs = [gr.Markdown(), gr.Dataframe(headers=["#", "prompt", "output", "tokens", "seconds"], interactive=False, wrap=True),
               gr.File(label="Results (CSV)", visible=False)]
    return SimpleNamespace(text=text, file=file, size=size, btn=btn, stop=stop, outputs=outputs)


def evaluate_tab() -> SimpleNamespace:
    gr.Markdown("Perplexity with a sliding window (for texts longer than the context) and the built-in date task's accuracy, "
                "for one model or two (A = left, B = the Compare tab's Model B).")
    text = gr.Textbox(label="Text (empty: use the dataset below)", lines=4)
    data = gr.Dropdown(choices=list(choices.BUILTIN_DATASETS), value="builtin:corpus", label="…or a built-in dataset")
    with gr.Row():
        window = named(gr.Number(value=0, precision=0, label="Window (0 = the model's context)"), "window")
        stride = named(gr.Number(value=0, precision=0, label="Stride (0 = window / 2)"), "stride")
        both = gr.Checkbox(value=False, label="Also model B")
    with gr.Row():
        ppl_btn, acc_btn = gr.Button("Perplexity", variant="primary"), gr.Button("Date-task accuracy")
    out = gr.Dataframe(headers=["model", "metric", "value", "details"], interactive=False, wrap=True)
    return SimpleNamespace(text=text, data=data, window=window, stride=stride, both=both, ppl_btn=ppl_btn, acc_btn=acc_btn, out=out)


def export_tab() -> SimpleNamespace:
    from engine.export.onnx import INSTALL_COMMAND, missing_packages

    missing = missing_packages()  # the optional packages (requirements-onnx.txt): say so before the click, not after
    gr.Markdown("Export the model on the left (a compact model, a full/scratch run, or a merged run) to ONNX, run it with "
                "ONNX Runtime on the CPU, and compare it with PyTorch. The download is one zip: `model.onnx`, its weights "
                "`model.onnx.data`, the tokenizer and `onnx_info.json`."
                + (f"\n\n**Not available here:** {', '.join(missing)} not installed. Enable it with `{INSTALL_COMMAND}` and restart the app."
                   if missing else ""), elem_id="playground-onnx-note")
    prompts = gr.Textbox(label="Test prompts, one per line", lines=3, value="A memória da GPU\nThe KV cache", interactive=not missing)
    btn = gr.Button("Export and compare", variant="primary", interactive=not missing)
    outputs = [gr.Dataframe(headers=["check", "value"], interactive=False), gr.File(label="ONNX export (zip)", visible=False)]
    return SimpleNamespace(prompts=prompts, btn=btn, outputs=outputs)


def chat_handlers(load: Any, gen_names: list[str], signals: StopSignals) -> SimpleNamespace:
    """Handlers of the Chat and Compare tabs and the decoding presets (inputs end with the generation settings); load: load_for_playground."""

    @ui_errors
    def on_send(request: gr.Request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, *gen_vals):
        settings, extra = playground.prompt_settings(gen_names, gen_vals, prompt_v)
        loaded = load(model_ref, quant_mode, extra)
        stop_ev = signals.fresh(request.session_hash or "")
        info = playground.model_info(loaded)
        for turn, stats in playground.chat_turn(loaded, mode_v, system_v, list(history or []), prompt_v, settings, stop_ev):
            yield turn, "", stats, info

    def on_regenerate(history):
        if (turn := playground.drop_last_turn(history)) is None:
            raise gr.Error("Nothing to regenerate yet.")
        return turn

    @ui_errors
    def on_compare(request: gr.Request, ref_a, ref_b, quant_mode, mode_v, system_v, prompt_v, *gen_vals):
        settings, extra = playground.prompt_settings(gen_names, gen_vals, prompt_v)
        request_msgs = playground.generation_request(mode_v, system_v, [], prompt_v)
        stop_ev = signals.fresh(request.session_hash or "")
        yield from playground.compare_turns(lambda side, ref: load(ref, quant_mode, playground.side_extra(extra, side)), (ref_a, ref_b), request_msgs,
                                            playground.compare_settings(settings), chat=mode_v == "chat", stop_event=stop_ev)

    def on_preset(name, *gen_vals):
        return [gr.update(value=v) for v in playground.preset_values(name, playground.split_gen_values(gen_names, gen_vals)[0], gen_names)]

    def on_stop(request: gr.Request) -> None:
        signals.stop(request.session_hash or "")

    return SimpleNamespace(on_send=on_send, on_regenerate=on_regenerate, on_compare=on_compare, on_preset=on_preset, on_stop=on_stop)


def batch_eval_handlers(jobs: JobManager, load: Any, allow_local_models: bool, gen_names: list[str], signals: StopSignals) -> SimpleNamespace:
    """Handlers of the Batch, Evaluate and Export tabs; their inputs end with the (adapter, placement, GPU budget)."""

    @ui_errors
    def on_batch(request: gr.Request, ref_v, quant_mode, mode_v, text_v, file_v, micro, *gen_vals):
        from engine.inference.batch import parse_prompts

        prompts = parse_prompts(text_v or None, file_v)
        loaded = load(ref_v, quant_mode, tuple(gen_vals[len(gen_names):]))  # the settings are read after the load, as before
        stop_ev = signals.fresh(request.session_hash or "")
        settings = playground.split_gen_values(gen_names, gen_vals)[0]
        for line, rows, csv in playground.batch_updates(loaded, prompts, settings, chat=mode_v == "chat", micro_batch=playground.micro_batch_of(micro),
                                                        stop_event=stop_ev):
            yield line, rows, gr.update(value=str(csv), visible=True) if csv else gr.skip()

    @ui_errors
    def on_eval(kind, ref_a, ref_b, quant_mode, both, text_v, data_v, window, stride, *extra):
        refs = [ref_a] + ([ref_b] if both else [])
        return playground.evaluation_rows(kind, lambda ref, ex: load(ref, quant_mode, ex), refs, extra, text_v, data_v, window, stride)

    @ui_errors
    def on_onnx(ref_v, prompts_v):
        ref, loaded = playground_load.load_for_export(jobs, ref_v, allow_local_models=allow_local_models)
        rows, path = playground.onnx_export_check(loaded, ref, prompts_v, jobs.runs_dir)
        return rows, gr.update(value=str(path), visible=True)

    return SimpleNamespace(on_batch=on_batch, on_eval=on_eval, on_onnx=on_onnx)


def model_list_updates(jobs: JobManager) -> tuple:
    """New choices for the playground's Model, Model B and Adapter dropdowns (runs finished since the page was built)."""
    return tuple(gr.update(choices=c) for c in choices.playground_lists(jobs))


def build_playground(jobs: JobManager, allow_local_models: bool = False) -> dict[str, Any]:
    with gr.Row():
        with gr.Column(scale=2):
            models = choices.playground_models(jobs)
            s = model_settings(jobs, models)
        with gr.Column(scale=3):
            with gr.Tabs():
                with gr.Tab("Chat"):
                    c = chat_tab()
                with gr.Tab("Compare"):
                    cmp = compare_tab(models)
                with gr.Tab("Batch"):
                    b = batch_tab()
                with gr.Tab("Evaluate"):
                    e = evaluate_tab()
                with gr.Tab("Export (ONNX)"):
                    x = export_tab()
    gen = list(s.gen.values())
    signals = StopSignals()
    load = functools.partial(playground_load.load_for_playground, jobs, allow_local_models=allow_local_models)
    h, be = chat_handlers(load, list(s.gen), signals), batch_eval_handlers(jobs, load, allow_local_models, list(s.gen), signals)

    send_inputs = [s.model, s.quant, s.mode, s.system, c.prompt, c.chat, *gen, *s.load_extra]
    chat_outputs = [c.chat, c.prompt, c.stats, s.model_info]
    c.send.click(h.on_send, send_inputs, chat_outputs, api_name="generate", **GPU)
    c.prompt.submit(h.on_send, send_inputs, chat_outputs, **GPU)
    c.regen.click(h.on_regenerate, [c.chat], [c.chat, c.prompt], queue=False).success(h.on_send, send_inputs, chat_outputs, **GPU)
    c.stop.click(h.on_stop, None, None, queue=False, api_name="stop_generation")
    c.clear.click(lambda: ([], ""), None, [c.chat, c.stats], queue=False)
    cmp.btn.click(h.on_compare, [s.model, cmp.model_b, s.quant, s.mode, s.system, cmp.prompt, *gen, *s.load_extra], cmp.outputs, api_name="compare", **GPU)
    cmp.stop.click(h.on_stop, None, None, queue=False)
    s.refresh.click(lambda: model_list_updates(jobs), None, [s.model, cmp.model_b, s.adapter], queue=False)
    s.unload.click(ui_errors(lambda: f"Unloaded {playground_load.unload_models()} model(s)."), None, [s.model_info], api_name="unload_models")
    s.preset.input(h.on_preset, [s.preset, *gen], gen, queue=False)
    x.btn.click(be.on_onnx, [s.model, x.prompts], x.outputs, api_name="export_onnx", **GPU)
    b.btn.click(be.on_batch, [s.model, s.quant, s.mode, b.text, b.file, b.size, *gen, *s.load_extra], b.outputs, api_name="batch_generate", **GPU)
    b.stop.click(h.on_stop, None, None, queue=False)
    eval_inputs = [s.model, cmp.model_b, s.quant, e.both, e.text, e.data, e.window, e.stride, *s.load_extra]
    e.ppl_btn.click(functools.partial(be.on_eval, "ppl"), eval_inputs, [e.out], api_name="perplexity", **GPU)
    e.acc_btn.click(functools.partial(be.on_eval, "acc"), eval_inputs, [e.out], api_name="task_accuracy", **GPU)
    return {"model": s.model, "model_b": cmp.model_b, "adapter": s.adapter}


# ---- MCP tools (python app.py --mcp) -------------------------------------------------------------

def mcp_tools(demo: gr.Blocks, jobs: JobManager, owner_only: bool, allow_local_models: bool) -> None:
    """The app's main functions as typed, documented API endpoints, which gradio's MCP server lists as tools
    (engine/views/assistant.py). On a shared app (owner_only) start/stop are left out: an MCP caller has no browser key.
    gradio's MCP server lists every documented endpoint, and the page's ~100 form handlers (each .change of a widget)
    would bury these few: with --mcp they become "undocumented" (still callable by gradio_client, off the API page
    and the MCP tool list)."""
    from engine.views import assistant

    for block_fn in demo.fns.values():
        if block_fn.api_visibility == "public":
            block_fn.api_visibility = "undocumented"
    for fn in assistant.tools(jobs, allow_control=not owner_only, allow_local_models=allow_local_models):
        limits = GPU if fn.__name__ == "generate" else JOBS if fn.__name__ == "start_training" else {}
        gr.api(ui_errors(fn), api_name=f"mcp_{fn.__name__}", **limits)


# ---- The page ------------------------------------------------------------------------------------

def build_app(runs_dir: Path, allow_local_models: bool = False, owner_only: bool | None = None, stop_grace_s: float = 20.0,
              mcp: bool = False) -> gr.Blocks:
    """The whole page. allow_local_models lets the playground load model folders from this machine's disk: only for a
    local, trusted `python app.py --allow-local-models`, never on a shared app (refused there). owner_only: only the
    session that started a run may act on it (default: shared mode, engine/sharing.py). stop_grace_s: how long a run asked
    to stop may take before its process tree is killed. mcp: add the assistant tools (see mcp_tools)."""
    runs_dir, upload_dir = Path(runs_dir), Path(runs_dir) / "_uploads"
    upload_dir.mkdir(parents=True, exist_ok=True)
    if allow_local_models and sharing.is_shared():
        raise EngineError("--allow-local-models cannot be used on a shared app: anyone with the link could read model folders on this machine.")
    sweep_uploads(upload_dir, runs_dir)  # uploads older than a day that no run names
    jobs = JobManager(runs_dir, owner_only=owner_only, stop_grace_s=stop_grace_s)  # shared by every browser session (its own lock serializes start/stop)
    with gr.Blocks(title="Compact LLM Lab") as demo:
        # This browser's key (engine/training/jobs.py "Who may stop a run"), kept in its local storage so that it survives reloads,
        # closed tabs and app restarts. At the top level: components inside a tab are not mounted until the tab is
        # opened, and an unmounted BrowserState is never read from or saved to the browser.
        browser_key = gr.BrowserState(None, storage_key="compact-llm-lab-owner")
        lang_switch = language_switch()
        gr.Markdown("# Compact LLM Lab\nEstimate memory, fine-tune with QLoRA/LoRA, and generate — on a small GPU, a free Colab T4, or a CPU. "
                    + ("This is a shared app: your runs and files are yours alone; others can see that runs exist." if sharing.is_shared()
                       else f"Runs are saved in `{runs_dir}`."))
        with gr.Tabs():
            with gr.Tab(T("estimator.tab")) as est_tab:
                est = build_estimator(upload_dir, jobs)
            with gr.Tab(T("finetune.tab")) as ft_tab:
                ft = build_finetune(jobs, upload_dir, allow_local_models)
            with gr.Tab(T("playground.tab")) as pg_tab:
                pg = build_playground(jobs, allow_local_models)

        form = ft["form"]

        @ui_errors
        def copy_to_finetune(pick_n, *vals):
            values, rank = estimate_view.finetune_values(est["query_of"](vals[0], *vals[2:]), vals[1], pick_n)
            gr.Info("Copied to the Fine-tune form" + (f" with suggestion #{rank}" if rank is not None else "") + ".")
            return [gr.update(value=values[n]) if n in values else gr.skip() for n in form]

        est["copy_btn"].click(copy_to_finetune, [est["pick"], *est["inputs"]], list(form.values()), api_name="copy_to_finetune")
        demo.load(est["on_estimate"], est["inputs"], est["outputs"], api_name="estimate", **ESTIMATE)
        demo.load(None, None, [lang_switch], js=LANG_NOW_JS)
        # gradio translates a tab's label when the tab is first shown: the others come from the server, in the page's language
        demo.load(lambda: [gr.Tab(label=tr(f"{k}.tab")) for k in ("estimator", "finetune", "playground")], None, [est_tab, ft_tab, pg_tab],
                  queue=False, api_visibility="private")
        demo.load(ft["on_load"], None, [ft["watched"], ft["run_pick"], ft["history"], ft["form"]["base_model"], ft["form"]["teacher_model"]])
        demo.load(ft["init_owner"], [browser_key], [browser_key, ft["owner"]], api_visibility="private", queue=False)
        demo.load(ft["offer"], None, ft["offer_outputs"], api_name="interrupted_run")
        demo.load(ft["predict"], ft["form_inputs"], [ft["prediction"]], api_name="predict_memory")
        # finished runs appear in the playground as soon as its tab is opened
        pg_tab.select(lambda: model_list_updates(jobs), None, [pg["model"], pg["model_b"], pg["adapter"]], queue=False)
        # a closed session's uploads go (those a run names stay, for Resume)
        def on_session_end(request: gr.Request) -> None:
            sweep_uploads(upload_dir, runs_dir, session=request.session_hash)

        demo.unload(on_session_end)
        if mcp:
            mcp_tools(demo, jobs, jobs.owner_only, allow_local_models)
    return demo


def login_of(args: argparse.Namespace, decision: sharing.Decision) -> tuple[tuple[str, str] | None, str | None]:
    """gradio's launch(auth=...) and a line to print: --auth USER:PASSWORD or COMPACT_LAB_AUTH (a Space secret); on
    Colab with a public link, a login with a password generated now unless --no-auth."""
    spec = args.auth or os.environ.get(AUTH_ENV, "")
    if args.no_auth:
        if decision.shared:
            return None, "WARNING: --no-auth on a shared app: anyone with the link can use it (train, load models, fill the disk)."
        return None, None
    if spec:
        user, sep, password = spec.partition(":")
        if not sep or not user or not password:
            raise SystemExit(f"--auth / {AUTH_ENV} must be USER:PASSWORD (both non-empty).")
        return (user, password), f"Login required: user {user!r} (the password you gave)."
    if sharing.on_colab() and decision.shared:
        password = secrets.token_urlsafe(9)
        return ("lab", password), f"Login is on for this public link: user 'lab', password {password} (new at every start; --no-auth turns it off)."
    return None, None


AUTH_ENV = "COMPACT_LAB_AUTH"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Compact LLM Lab web app")
    parser.add_argument("--share", action="store_true", help="Create a public gradio.live link (on by default on Colab).")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="0.0.0.0 to listen on all interfaces (the app is then shared: see docs/security.md).")
    parser.add_argument("--runs-dir", default=None, help="Where runs are stored (default: $COMPACT_LAB_RUNS or ./runs).")
    parser.add_argument("--allow-local-models", action="store_true",
                        help="Let the playground and the fine-tune form use model folders on this machine's disk (a trusted local app only, never when shared).")
    parser.add_argument("--auto-resume", action="store_true",
                        help="At start, resume the newest interrupted run (its process ended without finishing: a Colab disconnect).")
    parser.add_argument("--auth", default=None, metavar="USER:PASSWORD", help=f"Ask for a login (also ${AUTH_ENV}, e.g. a Space secret).")
    parser.add_argument("--no-auth", action="store_true", help="No login, even on a Colab public link (anyone with the link can use the app).")
    parser.add_argument("--share-owner-token", action="store_true",
                        help="On a shared app, let visitors' model loads use this server's HF_TOKEN: anyone with the link can then read "
                             "your private and gated repositories. Off by default.")
    parser.add_argument("--mcp", action="store_true",
                        help="Also serve the app's main functions (estimate memory, list models and runs, start/stop/status of a training run, "
                             "generate) as MCP tools for AI assistants at /gradio_api/mcp/ (needs the mcp package of requirements.txt).")
    args = parser.parse_args(argv)
    decision = sharing.decide(share=args.share, host=args.host)
    if args.allow_local_models and decision.shared:
        parser.error("--allow-local-models cannot be used on a shared app (" + "; ".join(decision.reasons) + "): anyone with the link could read "
                     "model folders on this machine.")
    sharing.activate(decision.shared, owner_token=args.share_owner_token)
    if decision.shared:
        print("Shared app (" + "; ".join(decision.reasons) + "): runs and files belong to the session that made them; no remote code; "
              + ("visitors' loads USE this server's HF_TOKEN (--share-owner-token)." if args.share_owner_token else "the server's HF_TOKEN is not used for visitors."))
    auth, note = login_of(args, decision)
    if note:
        print(note, flush=True)
    if args.runs_dir:
        os.environ["COMPACT_LAB_RUNS"] = args.runs_dir
    runs_dir = default_runs_dir()
    demo = build_app(runs_dir, allow_local_models=args.allow_local_models, mcp=args.mcp)
    if args.auto_resume:
        try:
            print(run_control.auto_resume(JobManager(runs_dir)) or "--auto-resume: no interrupted run to resume.", flush=True)
        except EngineError as exc:  # e.g. a run is still going: the app starts anyway, and says why nothing resumed
            print(f"--auto-resume: {exc}", flush=True)
    demo.queue(default_concurrency_limit=1)
    # No allowed_paths: files handed back (zips, CSVs, ONNX) are copied by gradio into its own cache from a private folder.
    # show_error: gradio's own input checks (a value outside a dropdown's choices) reach an API caller as a message;
    # every handler turns its own errors into messages without server details (ui_errors).
    demo.launch(share=args.share or None, server_name=args.host, server_port=args.port, auth=auth,
                max_file_size=MAX_FILE_BYTES, show_error=True, mcp_server=args.mcp, **launch_options())


if __name__ == "__main__":
    main()
