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
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from engine import i18n, sharing
from engine.config import GenerationSettings, GgufSettings, MemoryQuery, QuantSettings, TrainConfig
from engine.data.files import MAX_FILE_BYTES
from engine.errors import ConfigError, EngineError
from engine.estimator import memory, recipes
from engine.estimator.handoff import check_ui_estimator_model
from engine.fields import field_specs, from_flat
from engine.refs import default_runs_dir
from engine.training.jobs import JobManager
from engine.views import choices, estimate_view, finetune_form, playground, playground_load, refresh, run_charts, run_control, run_history, run_view
from engine.views.signals import StopSignals
from engine.views.uploads import keep_upload, session_dir, sweep_uploads

GPU = {"concurrency_limit": 1, "concurrency_id": "gpu"}  # one generation, evaluation, export or merge at a time
JOBS = {"concurrency_limit": 1, "concurrency_id": "jobs"}  # one start, resume or retry of a training run at a time
QUIET = {"queue": False, "show_progress": "hidden"}  # instant updates as the form changes
ESTIMATE = {"concurrency_limit": 2, "concurrency_id": "estimate"}  # the estimator's architecture work, queued (a shared app's visitors take turns)

# ---- Languages: static texts translated in the browser, server-built texts in the visitor's language ----------------

I18N = gr.I18n(**i18n.translations())
T = I18N  # T("finetune.tab"): a static text, translated by the browser (presets/lang/*.yaml)

# The language: the browser's (gradio's gr.I18n follows navigator.language) unless the page's switch chose one (kept in
# local storage, applied at load through gradio's own changeLocale). A cookie tells the server (lang_of), so texts built
# there (statuses, tables, errors) come in the same language.
LANG_HEAD = r"""<script>
(() => {
  let l = null;
  try { l = localStorage.getItem("@COOKIE@"); } catch (e) {}
  const eff = (l || navigator.language || "en").toLowerCase().startsWith("pt") ? "pt-BR" : "en";
  document.cookie = "@COOKIE@=" + eff + "; path=/; max-age=31536000; SameSite=Lax";
  window.labSetLocale = async (lang) => {
    const url = performance.getEntriesByType("resource").map((e) => e.name).find((n) => /\/assets\/core-[^/]*\.js$/.test(n));
    if (url) { try { (await import(url)).changeLocale(lang); } catch (e) {} }
  };
  if (l) window.labSetLocale(l);  // gradio runs this head before it mounts the page: labels come in the chosen language
})();
</script>""".replace("@COOKIE@", i18n.COOKIE)
LANG_SWITCH_JS = """(l) => {
  try { localStorage.setItem("@COOKIE@", l); } catch (e) {}
  document.cookie = "@COOKIE@=" + l + "; path=/; max-age=31536000; SameSite=Lax";
  location.reload();
  return l;
}""".replace("@COOKIE@", i18n.COOKIE)
LANG_NOW_JS = """async () => {
  let saved = null;
  try { saved = localStorage.getItem("@COOKIE@"); } catch (e) {}
  if (saved && window.labSetLocale) await window.labSetLocale(saved);
  const l = saved || navigator.language || "en";
  return l.toLowerCase().startsWith("pt") ? "pt-BR" : "en";
}""".replace("@COOKIE@", i18n.COOKIE)


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


# The page's own style (launch_options): the guided strip, phone widths, readable tables. Selectors use the page's
# elem_ids/elem_classes and gradio 6's documented class names (.row, .column, .table-wrap).
CSS = """
#page-title h1 { margin: 0; }
/* the language switch sits at the title's right, not on a line of its own */
@media (min-width: 641px) { #lang-switch { position: absolute; top: 12px; right: 16px; width: auto; z-index: 10; } }
#page-intro, #page-notice { padding-top: 0; padding-bottom: 0; }

/* the guided strip: three steps, an arrow between them; each step opens its panel, the open panel's step is marked.
   (gradio prefixes the rules inside @media with .gradio-container... .contain: hence div:has(), not .gradio-container:has()) */
#guide { gap: 22px; margin: 2px 0 4px; }
#guide .guide-step { position: relative; justify-content: flex-start; gap: 6px; padding: 10px 12px; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-lg); background: var(--block-background-fill); }
#guide .guide-step:not(:last-child)::after { content: "→"; position: absolute; right: -19px; top: 50%; transform: translateY(-50%);
  font-size: 20px; font-weight: 700; line-height: 1; color: var(--body-text-color-subdued); pointer-events: none; }
#guide .guide-step { flex-direction: row !important; align-items: center; }  /* a step's sentence beside its button: the form stays in the first screen */
#guide .guide-step button { flex: 0 0 auto; font-weight: 600; font-size: var(--text-md); }
#guide .guide-hint { padding: 0; border: 0; background: none; box-shadow: none; }
#guide .guide-hint p { margin: 0; font-size: var(--text-sm); line-height: 1.4; color: var(--body-text-color); opacity: 0.8; }
div:has(#est-panel-button[aria-selected="true"]) #guide-estimate,
div:has(#ft-panel-button[aria-selected="true"]) #guide-finetune,
div:has(#pg-panel-button[aria-selected="true"]) #guide-try {
  background: var(--button-primary-background-fill); color: var(--button-primary-text-color); border-color: var(--button-primary-border-color); }

/* tables: no column wider than about 20 characters (gradio sizes a column by its longest cell, up to the whole table:
   one long cell hid every other column); what is wider scrolls sideways inside the table; header words never break */
.table-wrap { --df-max-col-width: 20em !important; }
.table-wrap th .header, .table-wrap th span { word-break: normal !important; overflow-wrap: normal !important; hyphens: none; }

/* phone widths: the panels' tabs wrap onto a second line (build_app), results come before the long forms */
@media (max-width: 640px) {
  .form-results > .column:last-child { order: -1; }
  /* the fine-tune panel's results come first, so its Start/Stop stay on screen in a bar at the bottom */
  #ft-panel .row:has(> #finetune-start) { position: fixed; left: 0; right: 0; bottom: 0; z-index: 1000; margin: 0; padding: 8px 12px;
    flex-wrap: nowrap; align-items: stretch; background: var(--background-fill-primary); border-top: 1px solid var(--border-color-primary);
    box-shadow: 0 -2px 8px rgba(0, 0, 0, 0.08); }
  #ft-panel .row:has(> #finetune-start) > button { min-width: 0 !important; }
  #ft-panel { padding-bottom: 72px; }
  .table-wrap { --df-max-col-width: 46vw !important; }
  #page-title h1 { font-size: 1.5rem; }
  #page-intro p, #page-notice p { font-size: var(--text-sm); margin: 0; }
  /* the strip: the three steps in one line, and the sentence of the open panel's step under them */
  #guide { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 6px; }
  #guide .guide-step { display: contents; }
  #guide .guide-step:not(:last-child)::after { display: none; }
  #guide .guide-step button { grid-row: 1; min-width: 0; padding: 6px 4px; font-size: var(--text-sm); }
  #guide .block.guide-hint { grid-row: 2; grid-column: 1 / -1; display: none; }
  div:has(#est-panel-button[aria-selected="true"]) #guide-estimate-hint,
  div:has(#ft-panel-button[aria-selected="true"]) #guide-finetune-hint,
  div:has(#pg-panel-button[aria-selected="true"]) #guide-try-hint { display: block; }
}
"""


def language_switch() -> gr.Radio:
    """Português | English, at the top of the page: reloads the page in the chosen language (kept in the browser)."""
    switch = gr.Radio(choices=[("Português", "pt-BR"), ("English", "en")], value=None, label=T("app.language"), show_label=False,
                      container=False, elem_id="lang-switch")
    switch.input(None, [switch], [switch], js=LANG_SWITCH_JS)
    return switch


def guided_strip() -> list[gr.Button]:
    """1 Estimate → 2 Fine-tune → 3 Try it, under the title: one button per step (build_app wires each to open its
    panel) and one plain sentence saying what the step is for."""
    steps = []
    with gr.Row(elem_id="guide", equal_height=True):
        for key in ("estimate", "finetune", "try"):
            with gr.Column(min_width=0, elem_classes="guide-step"):
                steps.append(gr.Button(T(f"app.guide.{key}"), size="sm", elem_id=f"guide-{key}"))
                gr.Markdown(T(f"app.guide.{key}_hint"), elem_classes="guide-hint", elem_id=f"guide-{key}-hint")
    return steps


def open_panel(tab_id: str):
    """A handler that selects the panel `tab_id` of the page's gr.Tabs (a guided-strip step)."""
    return lambda: gr.Tabs(selected=tab_id)


# ---- Widgets generated from the config dataclasses -----------------------------------------------

def named(comp: gr.components.Component, field: str, owner: str | None = None) -> gr.components.Component:
    """A gr.Number, gr.Slider or gr.Dropdown whose wrong API values (text for a number, a value outside the choices...)
    are refused with a message naming the field (by its label too when `owner`, the form's dataclass, has one) and what
    is allowed, in the visitor's language; gradio's own says only "input component at index N" or "Value: X is not in
    the list of choices". (The instance's preprocess is wrapped: a subclass of a gradio component would make gradio
    write a .pyi stub beside this file.)"""
    original = comp.preprocess
    if isinstance(comp, gr.Dropdown):
        allowed = {"allowed": "choices", "choices": [c[1] if isinstance(c, tuple) else c for c in (comp.choices or [])]}
    elif isinstance(comp, gr.Slider):
        allowed = {"allowed": "range", "min": comp.minimum, "max": comp.maximum}
    else:
        allowed = {"allowed": "whole_number" if getattr(comp, "precision", None) == 0 else "number"}

    def preprocess(payload: Any) -> Any:
        try:
            return original(payload)
        except (TypeError, ValueError, OverflowError, gr.Error):
            raise gr.Error(ConfigError.of(field, payload, owner=owner, **allowed).render(lang_of())) from None

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
            comps[name] = named(gr.Dropdown(choices=list(spec.choices), **common), name, cls.__name__)
        elif spec.type in (int, float) and spec.min is not None and spec.max is not None and spec.step and (spec.max - spec.min) / spec.step <= 5000:
            comps[name] = named(gr.Slider(minimum=spec.min, maximum=spec.max, step=spec.step, **common), name, cls.__name__)
        elif spec.type in (int, float):
            # No gradio-side bounds: the dataclass validates, with a message that names the field.
            comps[name] = named(gr.Number(precision=0 if spec.type is int else None, **common), name, cls.__name__)
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
    """The model (a choice, an uploaded config.json or a described architecture), the card, the job's main settings and,
    folded, the others. Opens on a popular real model with checkpointing on, on this machine's card (estimate_view)."""
    model = gr.Dropdown(choices=estimate_view.model_choices(), value=estimate_view.DEFAULT_MODEL, allow_custom_value=True,
                        label=T("estimator.model"), info=T("estimator.model_info"), elem_id="estimator-model")
    # (name, id) choices: the value stays the tier id (API callers and the CLI use ids); names in the visitor's language on load
    tier = gr.Dropdown(choices=estimate_view.tier_choices(), value=estimate_view.opening_tier(), label=T("estimator.card"),
                       info=T("estimator.card_info"), elem_id="estimator-tier")
    main = ["task", "batch", "seq_len", "grad_ckpt", "grad_accum", "new_tokens"]
    comps = make_inputs(MemoryQuery, only=main, values=estimate_view.FORM_DEFAULTS)
    with gr.Accordion(T("estimator.more_settings"), open=False):
        comps.update(make_inputs(MemoryQuery, skip=("model", *main), values=estimate_view.FORM_DEFAULTS))
    form = {s.name: comps[s.name] for s in field_specs(MemoryQuery) if s.name in comps}  # the dataclass's order: the API's
    with gr.Accordion(T("estimator.describe"), open=False):
        config_file = gr.File(label=T("estimator.config_file"), file_types=[".json"])
        with gr.Row():
            layers = named(gr.Number(value=32, precision=0, label=T("estimator.layers")), "layers")
            hidden = named(gr.Number(value=4096, precision=0, label=T("estimator.hidden")), "hidden")
            heads = named(gr.Number(value=32, precision=0, label=T("estimator.heads")), "heads")
            kv = named(gr.Number(value=8, precision=0, label=T("estimator.kv_heads")), "kv_heads")
        with gr.Row():
            inter = named(gr.Number(value=14336, precision=0, label=T("estimator.intermediate")), "intermediate")
            vocab = named(gr.Number(value=128256, precision=0, label=T("estimator.vocab")), "vocab")
            tied = gr.Checkbox(value=False, label=T("estimator.tied"))
        manual_btn = gr.Button(T("estimator.use_arch"), size="sm")
    return SimpleNamespace(model=model, config_file=config_file, manual=[layers, hidden, heads, kv, inter, vocab, tied], manual_btn=manual_btn,
                           form=form, tier=tier)


def estimator_results() -> SimpleNamespace:
    """Totals, memory per card (bars), limits and make-it-fit with the copy to Fine-tune, the breakdown (bar and table),
    the verdicts as a table, and "your runs"."""
    totals = gr.Markdown(elem_id="estimator-totals")
    bars = gr.HTML(elem_id="estimator-bars")
    limits = gr.Markdown(elem_id="estimator-limits")
    fit = gr.Dataframe(interactive=False, label=T("estimator.fit_label"), wrap=True, visible=False, elem_id="estimator-fit",
                       column_widths=["44px", "44%", "84px", "40%"])
    with gr.Row():
        pick = gr.Number(value=1, precision=0, minimum=1, label=T("estimator.pick"), scale=1)
        copy_btn = gr.Button(T("estimator.copy"), scale=2)
    chart = gr.HTML(elem_id="estimator-breakdown-chart")
    breakdown = gr.Dataframe(interactive=False, label=T("estimator.breakdown_label"), wrap=True, column_widths=["25%", "64px", "62%"],
                             elem_id="estimator-breakdown")
    with gr.Accordion(T("estimator.cards_table"), open=False):
        tiers = gr.Dataframe(interactive=False, label=T("estimator.cards_label"), wrap=True, elem_id="estimator-verdicts")
    with gr.Accordion(T("estimator.runs_title"), open=False):
        runs_md = gr.Markdown()
        cols = estimate_view.runs_columns()
        runs_plot = gr.ScatterPlot(x=cols[0], y=cols[1], color=cols[4], tooltip=[cols[3], cols[2]], height=240, title=T("estimator.runs_plot"),
                                   show_label=False)
    return SimpleNamespace(outputs=[totals, chart, breakdown, tiers, limits, fit, runs_md, runs_plot, bars], pick=pick, copy_btn=copy_btn)


def build_estimator(upload_dir: Path, jobs: JobManager) -> dict[str, Any]:
    gr.Markdown(T("estimator.intro"))
    with gr.Row(elem_classes="form-results"):
        with gr.Column(scale=2):
            f = estimator_form()
        with gr.Column(scale=3):
            r = estimator_results()
    inputs = [f.model, f.tier, *f.form.values()]
    names = list(f.form)

    def query_of(model_v: str, *vals: Any) -> MemoryQuery:
        return from_flat(MemoryQuery, {"model": model_v, **dict(zip(names, vals, strict=True))})

    def on_estimate(model_v: str, tier_v: str, *vals: Any):
        lang = lang_of()
        out = list(estimate_view.estimate_or_warning(lambda: query_of(check_ui_estimator_model(model_v, upload_dir), *vals), tier_v,
                                                     runs_dir=jobs.runs_dir, shared=jobs.owner_only, lang=lang))
        out[5] = gr.Dataframe(value=out[5], visible=out[5] is not None and len(out[5]) > 0)  # "nothing to change" is said above it
        cols = estimate_view.runs_columns(lang)  # the scatter's columns (its axis titles) in the visitor's language
        out[7] = gr.ScatterPlot(value=out[7], x=cols[0], y=cols[1], color=cols[4], tooltip=[cols[3], cols[2]])
        return tuple(out)

    for comp in inputs:  # queued: building an architecture on the meta device is CPU work (two at a time, the latest value wins)
        comp.change(on_estimate, inputs, r.outputs, show_progress="hidden", trigger_mode="always_last", **ESTIMATE)
    # the cards' names in the visitor's language, on load (the value, a tier id, stays)
    gr.on(None, lambda: gr.Dropdown(choices=estimate_view.tier_choices(lang_of())), None, [f.tier], queue=False, api_visibility="private")

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
    with gr.Row():  # before how long to train: Start stays in the first screen at 1440x900, in both languages
        start = gr.Button(T("finetune.start"), variant="primary", elem_id="finetune-start")
        stop = gr.Button(T("finetune.stop"), variant="stop", elem_id="finetune-stop")
    with gr.Row():
        comps.update(make_inputs(TrainConfig, only=top[4:], values=values))
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
        # shown only where they apply to the picked run (run_view.run_buttons): no Resume on a finished run
        resume = gr.Button(T("finetune.actions.resume"), size="sm", visible=False, elem_id="finetune-resume")
        retry = gr.Button(T("finetune.actions.retry"), size="sm", visible=False, elem_id="finetune-retry")
        delete = gr.Button(T("finetune.actions.delete"), size="sm", variant="stop", visible=False, elem_id="finetune-delete")
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

    def buttons(pick):  # try it, resume, retry, delete: each shown where it applies to the picked run
        return tuple(gr.update(visible=v) for v in run_view.run_buttons(jobs, pick))

    def poll_values(name, pick, log_scale, smoothing, lang):  # None, or (the parts' values, whether the run trains)
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


def build_finetune(jobs: JobManager, upload_dir: Path, allow_local_models: bool = False) -> dict[str, Any]:
    """The Fine-tune panel. Phone-first order: the essentials and Start/Stop, then the watched run's results, then the
    closed accordions of details, the exports and the run history (a desktop shows each pair side by side)."""
    watched = gr.State(None)  # the run this browser session is watching
    owner = gr.State(None)  # this browser's key (see build_app), as a session State: it never appears in the API
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
    # every 2 s, and asleep when nothing moves (on_tick): each tick costs the browser about 0.1-0.2 s of CPU whatever it
    # carries, which a 2-core laptop takes from the training (bench/watch_cost.py)
    timer = gr.Timer(2.0)
    fh, rh = form_handlers(jobs, upload_dir, allow_local_models, list(form)), run_handlers(jobs)
    run_buttons = [act.try_btn, act.resume, act.retry, act.delete]
    poll_inputs, poll_outputs = [watched, run_pick, view.log_scale, view.smoothing], [*view.outputs, history, details, *run_buttons]

    seen = gr.State(None)  # what this browser was last sent (refresh.changed_parts)
    # a refresh at once, which also wakes the timer while the run trains or merges (see on_tick)
    wake = {"fn": rh.on_tick, "inputs": [*poll_inputs, seen], "outputs": [*poll_outputs, seen, timer], **QUIET, "api_visibility": "private"}
    f.start.click(fh.on_start, [owner, *inputs], [watched, run_pick], api_name="start_training", **JOBS).then(**wake)
    f.stop.click(rh.on_stop, [watched, owner], None, api_name="stop_training")
    act.resume.click(rh.on_resume, [run_pick, owner], [watched], api_name="resume_training", **JOBS).then(**wake)
    banner.btn.click(rh.on_resume, [banner.offered, owner], [watched], api_name="resume_interrupted", **JOBS).then(
        rh.on_offer, None, banner.outputs, **QUIET).then(**wake)
    act.delete.click(rh.on_delete, [run_pick, owner], [watched, run_pick, history], api_name="delete_run")
    act.retry.click(rh.on_retry, [run_pick, owner], [watched, run_pick], api_name="retry_oom", **JOBS).then(**wake)
    more.inspect_btn.click(fh.on_inspect, inputs, more.inspect_out, api_name="inspect_data")
    run_pick.input(lambda n: n, [run_pick], [watched], queue=False).then(**wake)
    run_pick.change(rh.on_pick, [run_pick], [details, exp.gguf_note, *run_buttons], **QUIET, api_visibility="private")
    history.select(rh.on_history_select, None, [watched, run_pick], **QUIET, api_visibility="private").then(**wake)
    exp.zip_btn.click(rh.on_zip, [run_pick, owner], [exp.download], api_name="download_run")
    exp.merge_btn.click(rh.on_merge, [run_pick, owner], None, api_name="merge_adapter", **GPU).then(**wake)
    exp.gguf_btn.click(rh.on_gguf, [run_pick, exp.gguf_type, owner], [exp.download, exp.gguf_note], api_name="export_gguf", **GPU)
    more.show_cmd.click(fh.on_show_cmd, inputs, [more.command], api_name="show_command")
    more.preset_btn.click(fh.on_preset, [more.preset, *inputs], [more.preset_note, *form.values()], api_name="apply_preset").then(
        fh.on_predict, inputs, [f.prediction], **QUIET)
    timer.tick(rh.on_tick, [*poll_inputs, seen], [*poll_outputs, seen, timer], **QUIET).then(None, None, None, js=FOLLOW_LOG_JS, queue=False,
                                                                                           api_visibility="private")
    view.log_scale.input(rh.on_poll, poll_inputs, poll_outputs, **QUIET, api_visibility="private")
    view.smoothing.release(rh.on_poll, poll_inputs, poll_outputs, **QUIET, api_visibility="private")
    form["method"].change(lambda m: [gr.update(visible=m == "distill")] * len(distill_only), [form["method"]], distill_only, **QUIET, api_visibility="private")
    for comp in form.values():
        comp.change(fh.on_predict, inputs, [f.prediction], **QUIET)
    return {"form": form, "watched": watched, "run_pick": run_pick, "history": history, "on_load": rh.on_load, "init_owner": rh.init_owner,
            "owner": owner, "predict": fh.on_predict, "form_inputs": inputs, "prediction": f.prediction,
            "offer": rh.on_offer, "offer_outputs": banner.outputs, "try_btn": act.try_btn, "try_run": run_pick, "wake": wake}


# ---- Panel 3: playground -------------------------------------------------------------------------

SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "seed")  # the settings greedy decoding ignores (penalties still apply)
EVAL_DATASET = "builtin:corpus"  # the Evaluate tab's default text: plain paragraphs in both languages
ONNX_PROMPTS = "A memória da GPU\nThe KV cache"  # sample prompts for the ONNX check (data, the same in every language)


def preset_label(name: str) -> Any:
    """A decoding preset's name for the radio: translated when the language files know it (presets/generation.yaml may add more)."""
    return T(f"playground.preset.{name}") if f"playground.preset.{name}" in i18n.strings("en") else name


def preset_help(name: str | None, lang: str) -> str:
    """One plain sentence on what a preset does (the preset file's own description for a preset the language files lack)."""
    from engine.inference.presets import generation_presets

    key = f"playground.preset.{name}_help"
    if key in i18n.strings("en"):
        return i18n.t(key, lang)
    return generation_presets().get(name or "", {}).get("description", "")


def model_settings(jobs: JobManager, models: list[str], start: Any) -> SimpleNamespace:
    """The model and its line, the decoding preset up front with max new tokens, the sampling settings in a closed
    accordion (greedy switches them off), and the loading options (quantization, adapter, placement, system prompt)."""
    import importlib.util

    from engine.fields import to_dict
    from engine.hardware.device import detect_device
    from engine.inference.presets import apply_preset, generation_presets

    model = gr.Dropdown(choices=models, value=start.model, allow_custom_value=True, label=T("playground.model.label"), elem_id="playground-model",
                        info=T("playground.model.info"))
    with gr.Row():
        # on a shared app the model cache serves every visitor: nobody may empty it (engine/views/playground_load.py)
        refresh = gr.Button(T("playground.model.refresh"), size="sm")
        unload = gr.Button(T("playground.model.unload"), size="sm", visible=not sharing.is_shared())
    model_info_md = gr.Markdown(elem_id="playground-model-info")
    presets = generation_presets()
    preset = gr.Radio(choices=[(preset_label(k), k) for k in presets], value=start.preset, label=T("playground.preset.label"),
                      info=T("playground.preset.info"), elem_id="playground-preset")
    help_md = gr.Markdown(preset_help(start.preset, "en"), elem_id="playground-preset-help")
    values = to_dict(apply_preset(start.preset))
    names = [s.name for s in field_specs(GenerationSettings)]
    first = make_inputs(GenerationSettings, only=["max_new_tokens"], values=values)
    with gr.Accordion(T("playground.preset.sampling"), open=False, elem_id="playground-sampling"):
        greedy_note = gr.Markdown(T("playground.preset.greedy_note"), visible=not values["do_sample"], elem_id="playground-greedy-note")
        rest = make_inputs(GenerationSettings, only=[n for n in names if n != "max_new_tokens"], values=values)
    for name in SAMPLING_ONLY:  # greedy: visibly off, not merely ignored
        rest[name].interactive = bool(values["do_sample"])
    gen = {n: {**first, **rest}[n] for n in names}  # in field order: the API's order
    mode = gr.Radio(choices=[(T("playground.mode.chat"), "chat"), (T("playground.mode.completion"), "completion")], value=start.mode,
                    label=T("playground.mode.label"), info=T("playground.mode.info"), elem_id="playground-mode")
    with gr.Accordion(T("playground.loading.accordion"), open=False):
        quant_spec = field_specs(QuantSettings)[0]
        quant = gr.Dropdown(choices=list(quant_spec.choices), value=quant_spec.default, label=T("field.QuantSettings.mode.label"),
                            info=T("field.QuantSettings.mode.help"), elem_id="playground-quant")
        # 8/4-bit need bitsandbytes (requirements.txt); int8-dynamic is CPU-only: said before anyone picks them
        gr.Markdown(T("playground.loading.needs_bnb"), visible=importlib.util.find_spec("bitsandbytes") is None, elem_id="playground-bnb-note")
        gr.Markdown(T("playground.loading.int8_gpu"), visible=detect_device().kind == "cuda")
        system = gr.Textbox(label=T("playground.loading.system"), info=T("playground.loading.system_info"), lines=2)
        adapter = gr.Dropdown(choices=choices.adapter_choices(jobs), value=choices.NO_ADAPTER, label=T("playground.loading.adapter"),
                              elem_id="playground-adapter", allow_custom_value=True, info=T("playground.loading.adapter_info"))
        has_accelerate = importlib.util.find_spec("accelerate") is not None
        labels = {"one device": T("playground.loading.placement_one"), "auto (offload to CPU/disk)": T("playground.loading.placement_auto")}
        placement = gr.Radio(choices=[(labels.get(p, p), p) for p in choices.PLACEMENTS], value=next(iter(choices.PLACEMENTS)), label=T("playground.loading.placement"),
                             info=T("playground.loading.placement_info"), interactive=has_accelerate)
        gr.Markdown(T("playground.loading.needs_accelerate"), visible=not has_accelerate)
        gpu_budget = gr.Number(value=0, minimum=0, maximum=1024, label=T("playground.loading.budget"), info=T("playground.loading.budget_info"),
                               interactive=has_accelerate)
    return SimpleNamespace(model=model, refresh=refresh, unload=unload, quant=quant, adapter=adapter, model_info=model_info_md, mode=mode,
                           system=system, preset=preset, help=help_md, greedy_note=greedy_note, gen=gen,
                           load_extra=[adapter, placement, gpu_budget])  # last, so API callers may leave them out


def chat_tab(start: Any) -> SimpleNamespace:
    """The conversation, the prompt (filled with the model's example), the error line beside it, keep-conversation and the buttons."""
    chat = gr.Chatbot(label=T("playground.chat.conversation"), height=420, buttons=["copy"], placeholder=T("playground.chat.empty"),
                      elem_id="playground-chat")
    prompt = gr.Textbox(label=T("playground.chat.prompt"), value=start.example, placeholder=T("playground.chat.prompt_placeholder"), lines=2,
                        elem_id="playground-prompt")
    notice = gr.Markdown(elem_id="playground-notice")  # errors show here, beside the prompt: the conversation stays
    keep = gr.Checkbox(value=start.keep, label=T("playground.chat.keep"), info=T("playground.chat.keep_info"), elem_id="playground-keep")
    with gr.Row():
        send = gr.Button(T("playground.chat.send"), variant="primary", elem_id="playground-send")
        stop, regen, clear = gr.Button(T("playground.chat.stop")), gr.Button(T("playground.chat.regen")), gr.Button(T("playground.chat.clear"))
    stats = gr.Markdown(elem_id="playground-stats")
    return SimpleNamespace(chat=chat, prompt=prompt, notice=notice, keep=keep, send=send, stop=stop, regen=regen, clear=clear, stats=stats)


def compare_tab(models: list[str], pair: tuple[str, str | None], note: str, example: str) -> SimpleNamespace:
    """Two models on one prompt: by default the base before training (A) and the newest run after it (B), with a line that says so."""
    gr.Markdown(T("playground.compare.intro"))
    note_md = gr.Markdown(note, elem_id="playground-compare-note")
    with gr.Row():
        model_a = gr.Dropdown(choices=models, value=pair[0], allow_custom_value=True, label=T("playground.compare.model_a"),
                              info=T("playground.compare.model_a_info"), elem_id="playground-model-a")
        model_b = gr.Dropdown(choices=models, value=pair[1], allow_custom_value=True, label=T("playground.compare.model_b"),
                              info=T("playground.compare.model_b_info"), elem_id="playground-model-b")
    prompt = gr.Textbox(label=T("playground.compare.prompt"), lines=2, value=example, elem_id="playground-compare-prompt")
    notice = gr.Markdown(elem_id="playground-compare-notice")
    with gr.Row():
        btn, stop = gr.Button(T("playground.compare.btn"), variant="primary"), gr.Button(T("playground.compare.stop"))
    with gr.Row():
        with gr.Column():
            out_a = gr.Textbox(label=T("playground.compare.out_a"), lines=8)
            stats_a = gr.Markdown()
        with gr.Column():
            out_b = gr.Textbox(label=T("playground.compare.out_b"), lines=8)
            stats_b = gr.Markdown()
    return SimpleNamespace(model_a=model_a, model_b=model_b, note=note_md, prompt=prompt, notice=notice, btn=btn, stop=stop,
                           outputs=[out_a, stats_a, out_b, stats_b])


def batch_tab() -> SimpleNamespace:
    gr.Markdown(T("playground.batch.intro"))
    text = gr.Textbox(label=T("playground.batch.text"), lines=6)
    file = gr.File(label=T("playground.batch.file"), file_types=[".txt", ".jsonl", ".csv"])
    size = named(gr.Slider(1, 64, value=8, step=1, label=T("playground.batch.size"), info=T("playground.batch.size_info")), "micro batch")
    with gr.Row():
        btn, stop = gr.Button(T("playground.batch.btn"), variant="primary"), gr.Button(T("playground.batch.stop"))
    status = gr.Markdown(elem_id="playground-batch-status")  # progress, and an error in the same place
    outputs = [status, gr.Dataframe(headers=playground.table_headers("batch", "en"), interactive=False, wrap=True),
               gr.File(label=T("playground.batch.results"), visible=False)]
    return SimpleNamespace(text=text, file=file, size=size, btn=btn, stop=stop, outputs=outputs)


def evaluate_tab() -> SimpleNamespace:
    gr.Markdown(T("playground.evaluate.intro"))
    text = gr.Textbox(label=T("playground.evaluate.text"), lines=4)
    data = gr.Dropdown(choices=list(choices.BUILTIN_DATASETS), value=EVAL_DATASET, label=T("playground.evaluate.data"))
    with gr.Row():
        window = named(gr.Number(value=0, precision=0, label=T("playground.evaluate.window")), "window")
        stride = named(gr.Number(value=0, precision=0, label=T("playground.evaluate.stride")), "stride")
        both = gr.Checkbox(value=False, label=T("playground.evaluate.both"))
    with gr.Row():
        ppl_btn, acc_btn = gr.Button(T("playground.evaluate.ppl_btn"), variant="primary"), gr.Button(T("playground.evaluate.acc_btn"))
    notice = gr.Markdown(elem_id="playground-eval-notice")
    out = gr.Dataframe(headers=playground.table_headers("eval", "en"), interactive=False, wrap=True)
    return SimpleNamespace(text=text, data=data, window=window, stride=stride, both=both, ppl_btn=ppl_btn, acc_btn=acc_btn, notice=notice, out=out)


def onnx_note(lang: str) -> str:
    """What the Export tab needs when its optional packages are missing, with the one command that installs them ("" when present)."""
    from engine.export.onnx import INSTALL_COMMAND, missing_packages

    missing = missing_packages()  # find_spec, nothing imported
    return i18n.t("playground.export.missing", lang, packages=", ".join(missing), command=INSTALL_COMMAND) if missing else ""


def export_tab() -> SimpleNamespace:
    from engine.export.onnx import missing_packages

    ready = not missing_packages()  # the optional packages (requirements-onnx.txt): say so before the click, not after
    gr.Markdown(T("playground.export.intro"))
    note = gr.Markdown(onnx_note("en"), elem_id="playground-onnx-note")
    prompts = gr.Textbox(label=T("playground.export.prompts"), lines=3, value=ONNX_PROMPTS, interactive=ready)
    btn = gr.Button(T("playground.export.btn"), variant="primary", interactive=ready, elem_id="playground-onnx-btn")
    notice = gr.Markdown(elem_id="playground-onnx-notice")
    outputs = [gr.Dataframe(headers=playground.table_headers("onnx", "en"), interactive=False), gr.File(label=T("playground.export.file"), visible=False)]
    return SimpleNamespace(note=note, prompts=prompts, btn=btn, notice=notice, outputs=outputs)


def beside(fn: Any, kept: Any) -> Any:
    """The page's variant of a handler: its outputs plus an empty notice line; on an error, `kept(*args)` (what was on
    screen: the conversation, the prompt...) plus the message, in the visitor's language, in the notice line beside the
    inputs. Nothing the person typed or got is replaced by an error badge; the API endpoint of the same handler still
    raises (ui_errors)."""

    def message(exc: Exception, args: tuple) -> str:
        request = next((a for a in args if isinstance(a, gr.Request)), None)
        lang = lang_of(request)
        if isinstance(exc, EngineError):
            text = exc.render(lang)
        elif isinstance(exc, gr.Error):
            text = exc.message
        else:  # never a traceback (or a server path) on the page; the details go to the server's log
            logging.getLogger("app").exception("unexpected error in %s", fn.__name__)
            text = i18n.t("message.unexpected", lang, kind=type(exc).__name__, where=fn.__name__.removeprefix("page_"))
        return i18n.t("playground.chat.error", lang, message=text)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args, **kwargs):
            try:
                for out in fn(*args, **kwargs):
                    yield (*out, "") if isinstance(out, tuple) else (out, "")
            except Exception as exc:  # noqa: BLE001 - shown beside the inputs (see message)
                yield (*kept(*args), message(exc, args))
        return gen

    @functools.wraps(fn)
    def plain(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - as above
            return (*kept(*args), message(exc, args))
        return (*out, "") if isinstance(out, tuple) else (out, "")
    return plain


def chat_handlers(load: Any, gen_names: list[str], signals: StopSignals) -> SimpleNamespace:
    """Handlers of the Chat and Compare tabs and the decoding presets (inputs end with the generation settings); load: load_for_playground.
    on_send / on_compare are the API's (errors raised); the *_page variants show errors beside the prompt instead."""

    def send_stream(request: gr.Request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, keep, *gen_vals):
        lang = lang_of(request)
        settings, extra = playground.prompt_settings(gen_names, gen_vals, prompt_v)
        loaded = load(model_ref, quant_mode, extra)
        stop_ev = signals.fresh(request.session_hash or "")
        info = playground.model_info(loaded, lang)
        for turn, stats in playground.chat_turn(loaded, mode_v, system_v, list(history or []), prompt_v, settings, stop_ev, keep=bool(keep), lang=lang):
            yield turn, "", stats, info

    @ui_errors
    def on_send(request: gr.Request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, *gen_vals):
        yield from send_stream(request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, True, *gen_vals)  # the caller's history is the conversation

    def page_send(request: gr.Request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, keep, *gen_vals):
        yield from send_stream(request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, keep, *gen_vals)

    def page_regenerate(request: gr.Request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, keep, *gen_vals):
        if (turn := playground.drop_last_turn(history)) is None:
            raise EngineError(key="playground.chat.nothing_to_regenerate")
        yield from send_stream(request, model_ref, quant_mode, mode_v, system_v, turn[1], turn[0], keep, *gen_vals)

    def kept_chat(request, model_ref, quant_mode, mode_v, system_v, prompt_v, history, *rest):
        return history or [], prompt_v, "", gr.skip()

    def compare_stream(request: gr.Request, ref_a, ref_b, quant_mode, mode_v, system_v, prompt_v, *gen_vals):
        settings, extra = playground.prompt_settings(gen_names, gen_vals, prompt_v)
        request_msgs = playground.generation_request(mode_v, system_v, [], prompt_v)
        stop_ev = signals.fresh(request.session_hash or "")
        yield from playground.compare_turns(lambda side, ref: load(ref, quant_mode, playground.side_extra(extra, side)), (ref_a, ref_b), request_msgs,
                                            playground.compare_settings(settings), chat=mode_v == "chat", stop_event=stop_ev, lang=lang_of(request))

    def on_preset(request: gr.Request, name, *gen_vals):
        """The preset's values, the sampling sliders on or off, its sentence and the greedy note."""
        settings = playground.split_gen_values(gen_names, gen_vals)[0]
        values = playground.preset_values(name, settings, gen_names)
        sampling = bool(values[gen_names.index("do_sample")])
        updates = [gr.update(value=v, interactive=sampling) if n in SAMPLING_ONLY else gr.update(value=v) for n, v in zip(gen_names, values, strict=True)]
        return [*updates, preset_help(name, lang_of(request)), gr.update(visible=not sampling)]

    def on_sampling(do_sample):
        """Sampling ticked or not (by hand): the sampling sliders follow, and the note says why they are off."""
        return [*(gr.update(interactive=bool(do_sample)) for _ in SAMPLING_ONLY), gr.update(visible=not do_sample)]

    def on_stop(request: gr.Request) -> None:
        signals.stop(request.session_hash or "")

    return SimpleNamespace(on_send=on_send, page_send=beside(page_send, kept_chat), page_regenerate=beside(page_regenerate, kept_chat),
                           on_compare=ui_errors(compare_stream), page_compare=beside(compare_stream, lambda *a: (gr.skip(),) * 4),
                           on_preset=on_preset, on_sampling=on_sampling, on_stop=on_stop)


def batch_eval_handlers(jobs: JobManager, load: Any, allow_local_models: bool, gen_names: list[str], signals: StopSignals) -> SimpleNamespace:
    """Handlers of the Batch, Evaluate and Export tabs; their inputs end with the (adapter, placement, GPU budget). on_* are the
    API's (errors raised); page_* show errors beside the inputs."""

    def batch(request: gr.Request, ref_v, quant_mode, mode_v, text_v, file_v, micro, *gen_vals):
        from engine.inference.batch import parse_prompts

        prompts = parse_prompts(text_v or None, file_v)
        loaded = load(ref_v, quant_mode, tuple(gen_vals[len(gen_names):]))  # the settings are read after the load, as before
        stop_ev = signals.fresh(request.session_hash or "")
        settings = playground.split_gen_values(gen_names, gen_vals)[0]
        for line, table, csv in playground.batch_updates(loaded, prompts, settings, chat=mode_v == "chat", micro_batch=playground.micro_batch_of(micro),
                                                         stop_event=stop_ev, lang=lang_of(request)):
            yield line, table, gr.update(value=str(csv), visible=True) if csv else gr.skip()

    def page_batch(*args):
        """The status line above the table is the batch's notice line: an error replaces the progress, not the results."""
        for out in beside(batch, lambda *a: (gr.skip(), gr.skip()))(*args):
            yield (out[-1], *out[:-1]) if out[-1] else out[:-1]

    def evaluate(kind, request: gr.Request, ref_a, ref_b, quant_mode, both, text_v, data_v, window, stride, *extra):
        lang = lang_of(request)
        refs = [ref_a] + ([ref_b] if both else [])
        rows = playground.evaluation_rows(kind, lambda ref, ex: load(ref, quant_mode, ex), refs, extra, text_v, data_v, window, stride, lang)
        return playground.table("eval", rows, lang)

    def onnx(request: gr.Request, ref_v, prompts_v):
        ref, loaded = playground_load.load_for_export(jobs, ref_v, allow_local_models=allow_local_models)
        rows, path = playground.onnx_export_check(loaded, ref, prompts_v, jobs.runs_dir)
        return playground.table("onnx", rows, lang_of(request)), gr.update(value=str(path), visible=True)

    def evaluation(kind: str) -> Any:
        def run(request: gr.Request, ref_a, ref_b, quant_mode, both, text_v, data_v, window, stride, *extra):
            return evaluate(kind, request, ref_a, ref_b, quant_mode, both, text_v, data_v, window, stride, *extra)

        run.__name__ = f"on_{'perplexity' if kind == 'ppl' else 'task_accuracy'}"
        return run

    return SimpleNamespace(on_batch=ui_errors(batch), page_batch=functools.wraps(batch)(page_batch),
                           on_eval=lambda kind: ui_errors(evaluation(kind)), page_eval=lambda kind: beside(evaluation(kind), lambda *a: (gr.skip(),)),
                           on_onnx=ui_errors(onnx), page_onnx=beside(onnx, lambda *a: (gr.skip(), gr.skip())))


def model_list_updates(jobs: JobManager) -> tuple:
    """New choices for the playground's Model, Model B, Adapter and Model A dropdowns (runs finished since the page was built)."""
    models, models_b, adapters = choices.playground_lists(jobs)
    return gr.update(choices=models), gr.update(choices=models_b), gr.update(choices=adapters), gr.update(choices=models)


def start_handlers(jobs: JobManager, s: SimpleNamespace, c: SimpleNamespace, cmp: SimpleNamespace, example: gr.State) -> SimpleNamespace:
    """What the playground shows for a model: at page load (the newest finished run, else the built-in model), on "Try it
    in the Playground" (a run), and when a model is picked by hand (its example prompt, single-turn or not, its mode)."""
    from engine.views import playground_defaults as pd

    gen_names = list(s.gen)

    def start_updates(ref: str | None, lang: str, pair: tuple[str, str | None]) -> list[Any]:
        from engine.inference.presets import generation_presets

        start = pd.start_for(jobs.runs_dir, ref, lang)
        preset = generation_presets()[start.preset]["settings"]
        sampling = bool(preset.get("do_sample", True))
        gen = [gr.update(value=preset[n], interactive=sampling) if n in preset and n in SAMPLING_ONLY else gr.update(value=preset[n]) if n in preset
               else gr.update(interactive=sampling) if n in SAMPLING_ONLY else gr.skip() for n in gen_names]
        models = choices.playground_models(jobs)
        return [gr.update(choices=models, value=start.model), gr.update(value=choices.NO_ADAPTER), gr.update(value=start.mode),
                gr.update(value=start.preset), preset_help(start.preset, lang), gr.update(visible=not sampling), *gen,
                [], gr.update(value=start.example), gr.update(value=start.keep), "", "",
                gr.update(choices=models, value=pair[0]), gr.update(choices=models, value=pair[1]), gr.update(value=start.example),
                pd.compare_note(jobs.runs_dir, pair[0], pair[1], lang), start.example]

    def try_it(run_name: str, lang: str = "en") -> list[Any]:
        """'Try it in the Playground' for a finished run: that run as the model, its example prompt, single-turn for a task,
        an empty conversation, and Compare on its base (before) against it (after). Updates `outputs`, in order."""
        ref = f"run:{run_name}"
        return start_updates(ref, lang, (pd.run_base(jobs.runs_dir, ref), ref))

    def on_load(request: gr.Request) -> list[Any]:
        lang = lang_of(request)
        tables = [gr.update(value={"headers": playground.table_headers(n, lang), "data": []}) for n in ("batch", "eval", "onnx")]
        return [*start_updates(pd.default_model(jobs), lang, pd.compare_pair(jobs)), *tables, onnx_note(lang)]

    def on_pick(ref, prompt_v, last_example, request: gr.Request):
        """A model picked by hand: its example replaces the prompt only when the prompt is empty or still the last example."""
        start = pd.start_for(jobs.runs_dir, ref, lang_of(request))
        replace = not (prompt_v or "").strip() or prompt_v == last_example
        return (gr.update(value=start.example) if replace else gr.skip(), gr.update(value=start.keep), gr.update(value=start.mode),
                start.example if replace else last_example)

    def on_pair(model_a, model_b, request: gr.Request) -> str:
        return pd.compare_note(jobs.runs_dir, model_a, model_b, lang_of(request))

    outputs = [s.model, s.adapter, s.mode, s.preset, s.help, s.greedy_note, *s.gen.values(), c.chat, c.prompt, c.keep, c.stats, c.notice,
               cmp.model_a, cmp.model_b, cmp.prompt, cmp.note, example]
    return SimpleNamespace(try_it=try_it, on_load=on_load, on_pick=on_pick, on_pair=on_pair, outputs=outputs)


def build_playground(jobs: JobManager, allow_local_models: bool = False) -> dict[str, Any]:
    from engine.views import playground_defaults as pd

    models = choices.playground_models(jobs)
    start, pair = pd.start_for(jobs.runs_dir, pd.default_model(jobs), "en"), pd.compare_pair(jobs)  # page load shows them in the visitor's language
    gr.Markdown(T("playground.intro"))
    with gr.Row(elem_classes="form-results"):
        with gr.Column(scale=2):
            s = model_settings(jobs, models, start)
        with gr.Column(scale=3):
            with gr.Tabs():
                with gr.Tab(T("playground.chat.tab")) as chat_t:
                    c = chat_tab(start)
                with gr.Tab(T("playground.compare.tab")) as compare_t:
                    cmp = compare_tab(models, pair, pd.compare_note(jobs.runs_dir, *pair, "en"), start.example)
                with gr.Tab(T("playground.batch.tab")) as batch_t:
                    b = batch_tab()
                with gr.Tab(T("playground.evaluate.tab")) as eval_t:
                    e = evaluate_tab()
                with gr.Tab(T("playground.export.tab")) as export_t:
                    x = export_tab()
    example = gr.State(start.example)  # the example the prompt box was last filled with (replaced on a model change; typed text is kept)
    gen = list(s.gen.values())
    signals = StopSignals()
    load = functools.partial(playground_load.load_for_playground, jobs, allow_local_models=allow_local_models)
    h, be = chat_handlers(load, list(s.gen), signals), batch_eval_handlers(jobs, load, allow_local_models, list(s.gen), signals)
    st = start_handlers(jobs, s, c, cmp, example)

    def api(fn: Any, inputs: list, outputs: list, api_name: str, **kw: Any) -> None:
        """An API endpoint that raises its errors (gradio_client, MCP), on a trigger the page never shows: the page's own
        buttons call the variant that shows errors beside the inputs instead of over the outputs."""
        gr.Button(visible=False).click(fn, inputs, outputs, api_name=api_name, **kw)

    send_inputs = [s.model, s.quant, s.mode, s.system, c.prompt, c.chat, *gen, *s.load_extra]
    chat_outputs = [c.chat, c.prompt, c.stats, s.model_info]
    api(h.on_send, send_inputs, chat_outputs, "generate", **GPU)
    page_inputs = [s.model, s.quant, s.mode, s.system, c.prompt, c.chat, c.keep, *gen, *s.load_extra]
    gr.on([c.send.click, c.prompt.submit], h.page_send, page_inputs, [*chat_outputs, c.notice], api_visibility="private", **GPU)
    c.regen.click(h.page_regenerate, page_inputs, [*chat_outputs, c.notice], api_visibility="private", **GPU)
    c.stop.click(h.on_stop, None, None, queue=False, api_name="stop_generation")
    c.clear.click(lambda: ([], "", ""), None, [c.chat, c.stats, c.notice], queue=False, api_visibility="private")
    cmp_inputs = [cmp.model_a, cmp.model_b, s.quant, s.mode, s.system, cmp.prompt, *gen, *s.load_extra]
    api(h.on_compare, cmp_inputs, cmp.outputs, "compare", **GPU)
    cmp.btn.click(h.page_compare, cmp_inputs, [*cmp.outputs, cmp.notice], api_visibility="private", **GPU)
    cmp.stop.click(h.on_stop, None, None, queue=False)
    for dropdown in (cmp.model_a, cmp.model_b):
        dropdown.input(st.on_pair, [cmp.model_a, cmp.model_b], [cmp.note], queue=False, api_visibility="private")
    lists = [s.model, cmp.model_b, s.adapter, cmp.model_a]
    s.refresh.click(lambda: model_list_updates(jobs), None, lists, queue=False)
    s.unload.click(ui_errors(lambda: tr("playground.model.unloaded", n=playground_load.unload_models())), None, [s.model_info], api_name="unload_models")
    s.model.input(st.on_pick, [s.model, c.prompt, example], [c.prompt, c.keep, s.mode, example], queue=False, api_visibility="private")
    s.preset.input(h.on_preset, [s.preset, *gen], [*gen, s.help, s.greedy_note], queue=False)
    s.gen["do_sample"].input(h.on_sampling, [s.gen["do_sample"]], [*(s.gen[n] for n in SAMPLING_ONLY), s.greedy_note], queue=False,
                             api_visibility="private")
    api(be.on_onnx, [s.model, x.prompts], x.outputs, "export_onnx", **GPU)
    x.btn.click(be.page_onnx, [s.model, x.prompts], [*x.outputs, x.notice], api_visibility="private", **GPU)
    batch_inputs = [s.model, s.quant, s.mode, b.text, b.file, b.size, *gen, *s.load_extra]
    api(be.on_batch, batch_inputs, b.outputs, "batch_generate", **GPU)
    b.btn.click(be.page_batch, batch_inputs, b.outputs, api_visibility="private", **GPU)
    b.stop.click(h.on_stop, None, None, queue=False)
    eval_inputs = [s.model, cmp.model_a, s.quant, e.both, e.text, e.data, e.window, e.stride, *s.load_extra]
    for kind, btn, name in (("ppl", e.ppl_btn, "perplexity"), ("acc", e.acc_btn, "task_accuracy")):
        api(be.on_eval(kind), eval_inputs, [e.out], name, **GPU)
        btn.click(be.page_eval(kind), eval_inputs, [e.out, e.notice], api_visibility="private", **GPU)
    tabs = [chat_t, compare_t, batch_t, eval_t, export_t]

    def on_load(request: gr.Request) -> list[Any]:
        # gradio translates a tab's label when the tab is first shown: the others come from the server, in the page's language
        lang = lang_of(request)
        labels = [gr.Tab(label=i18n.t(f"playground.{k}.tab", lang)) for k in ("chat", "compare", "batch", "evaluate", "export")]
        return [*st.on_load(request), *labels]

    return {"model": s.model, "model_b": cmp.model_b, "model_a": cmp.model_a, "adapter": s.adapter, "lists": lists,
            "try_it": st.try_it, "try_outputs": st.outputs,
            "on_load": on_load, "load_outputs": [*st.outputs, b.outputs[1], e.out, x.outputs[0], x.note, *tabs]}


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
        gr.Markdown("# " + i18n.t("app.title"), elem_id="page-title")  # the name, the same in every language
        gr.Markdown(T("app.intro"), elem_id="page-intro")
        # the runs folder is data (a path), so the line is rendered per visitor; a shared app's notice is the same for all
        notice = gr.Markdown(T("app.shared_notice") if sharing.is_shared() else "", elem_id="page-notice")
        guide = guided_strip()
        with gr.Tabs(selected="est", elem_id="panels") as tabs:
            with gr.Tab(T("estimator.tab"), id="est", elem_id="est-panel") as est_tab:
                est = build_estimator(upload_dir, jobs)
            with gr.Tab(T("finetune.tab"), id="ft", elem_id="ft-panel") as ft_tab:
                ft = build_finetune(jobs, upload_dir, allow_local_models)
            with gr.Tab(T("playground.tab"), id="pg", elem_id="pg-panel") as pg_tab:
                pg = build_playground(jobs, allow_local_models)
        # every gr.Tabs of the page (the playground's too) wraps its tab buttons onto more lines on a narrow screen
        for block in demo.blocks.values():
            if isinstance(block, gr.Tabs):
                block.overflow_behavior = "wrap"
        for step, tab_id in zip(guide, ("est", "ft", "pg"), strict=True):
            step.click(open_panel(tab_id), None, [tabs], queue=False, api_visibility="private")
        if not sharing.is_shared():
            demo.load(lambda: tr("app.runs_folder", path=str(runs_dir)), None, [notice], queue=False, api_visibility="private")

        form = ft["form"]

        @ui_errors
        def copy_to_finetune(pick_n, *vals):
            values, rank = estimate_view.finetune_values(est["query_of"](vals[0], *vals[2:]), vals[1], pick_n)
            gr.Info(tr("estimator.copied_with", rank=rank) if rank is not None else tr("estimator.copied"))
            return [gr.update(value=values[n]) if n in values else gr.skip() for n in form]

        est["copy_btn"].click(copy_to_finetune, [est["pick"], *est["inputs"]], list(form.values()), api_name="copy_to_finetune")
        demo.load(est["on_estimate"], est["inputs"], est["outputs"], api_name="estimate", **ESTIMATE)
        demo.load(None, None, [lang_switch], js=LANG_NOW_JS)
        # gradio translates a tab's label when the tab is first shown: the others come from the server, in the page's language
        demo.load(lambda: [gr.Tab(label=tr(f"{k}.tab")) for k in ("estimator", "finetune", "playground")], None, [est_tab, ft_tab, pg_tab],
                  queue=False, api_visibility="private")
        demo.load(ft["on_load"], None, [ft["watched"], ft["run_pick"], ft["history"], ft["form"]["base_model"], ft["form"]["teacher_model"]]).then(
            **ft["wake"])  # the opening run at once (the timer may have gone to sleep before it was set)
        demo.load(ft["init_owner"], [browser_key], [browser_key, ft["owner"]], api_visibility="private", queue=False)
        demo.load(ft["offer"], None, ft["offer_outputs"], api_name="interrupted_run")
        demo.load(ft["predict"], ft["form_inputs"], [ft["prediction"]], api_name="predict_memory")
        # finished runs appear in the playground as soon as its tab is opened
        pg_tab.select(lambda: model_list_updates(jobs), None, pg["lists"], queue=False)
        # "Try it in the Playground" on a finished run: the playground opens on that run with its example prompt
        @ui_errors
        def on_try(run_name: str | None, request: gr.Request) -> list[Any]:
            if not run_name:
                raise gr.Error(tr("finetune.actions.try_none"))
            return [*model_list_updates(jobs), *pg["try_it"](run_name, lang_of(request)), gr.Tabs(selected="pg")]

        ft["try_btn"].click(on_try, [ft["try_run"]], [*pg["lists"], *pg["try_outputs"], tabs], api_visibility="private")
        # the playground opens on the newest finished run (else the built-in model), with its example, in the visitor's language
        demo.load(pg["on_load"], None, pg["load_outputs"], queue=False, api_visibility="private")
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
