"""Panel 1, the memory estimator: the model, the card and the job's settings; totals, per-card bars, the breakdown and
make-it-fit. The tables and texts are built without gradio in engine/views/estimate_view.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr

from engine.config import MemoryQuery
from engine.estimator import memory
from engine.estimator.handoff import check_ui_estimator_model
from engine.fields import field_specs, from_flat
from engine.refs import visitor_scope
from engine.training.jobs import JobManager
from engine.views import estimate_view
from engine.views.uploads import keep_upload
from ui.errors import ui_errors
from ui.language import T, lang_of
from ui.queues import ESTIMATE
from ui.session import uploads_of
from ui.widgets import make_inputs, named


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

    def checked_query(request: gr.Request | None, model_v: str, *vals: Any) -> MemoryQuery:
        """The form's query with its model checked as a browser's (only this session's own uploaded config.json)."""
        return query_of(check_ui_estimator_model(model_v, uploads_of(upload_dir, request)), *vals)

    def on_estimate(request: gr.Request, model_v: str, tier_v: str, *vals: Any):
        lang = lang_of()
        with visitor_scope(uploads_of(upload_dir, request)):  # the engine's gate checks the same folder (engine/refs.py)
            out = list(estimate_view.estimate_or_warning(lambda: checked_query(request, model_v, *vals), tier_v,
                                                         runs_dir=jobs.runs_dir, shared=jobs.owner_only, lang=lang))
        out[5] = gr.Dataframe(value=out[5], visible=out[5] is not None and len(out[5]) > 0)  # "nothing to change" is said above it
        cols = estimate_view.runs_columns(lang)  # the scatter's columns (its axis titles) in the visitor's language
        out[7] = gr.ScatterPlot(value=out[7], x=cols[0], y=cols[1], color=cols[4], tooltip=[cols[3], cols[2]])
        return tuple(out)

    # the plan follows the card: never bf16 on a card without it (a T4 trains in fp16), amp-bf16 back on one with it
    f.tier.change(estimate_view.precision_for_card, [f.form["training_precision"], f.tier], [f.form["training_precision"]], queue=False,
                  api_visibility="private")
    for comp in inputs:  # queued: building an architecture on the meta device is CPU work (two at a time, the latest value wins)
        comp.change(on_estimate, inputs, r.outputs, show_progress="hidden", trigger_mode="always_last", **ESTIMATE)
    # the cards' names in the visitor's language, on load (the value, a tier id, stays)
    gr.on(None, lambda: gr.Dropdown(choices=estimate_view.tier_choices(lang_of())), None, [f.tier], queue=False, api_visibility="private")
    # the models too: offline, the Hub models are marked as needing the internet, in the visitor's language
    gr.on(None, lambda: gr.Dropdown(choices=estimate_view.model_choices(lang_of())), None, [f.model], queue=False, api_visibility="private")

    @ui_errors
    def on_manual(layers, hidden, heads, kv, inter, vocab, tied):
        return gr.update(value=memory.arch_from_manual(layers, hidden, heads, kv, inter, vocab, tied).ref)

    @ui_errors
    def on_config_upload(path, request: gr.Request):
        return gr.update(value=str(keep_upload(path, uploads_of(upload_dir, request), suffixes=[".json"], max_bytes=2**20))) if path else gr.skip()

    # no estimate (an unknown model, a bad value): no empty tables and nothing to hand over, the warning above says why.
    # Follows the breakdown's value (present only with an estimate), so that the "estimate" API keeps returning plain values.
    def on_breakdown(df):
        ok = df is not None and len(df) > 0
        return gr.Dataframe(visible=ok), gr.Dataframe(visible=ok), gr.Button(interactive=ok)

    r.breakdown.change(on_breakdown, [r.breakdown], [r.breakdown, r.tiers, r.copy_btn], queue=False, api_visibility="private")
    f.manual_btn.click(on_manual, f.manual, [f.model], api_name="manual_architecture")
    f.config_file.upload(on_config_upload, [f.config_file], [f.model])
    return {"inputs": inputs, "query_of": query_of, "checked_query": checked_query, "scope": lambda request: visitor_scope(uploads_of(upload_dir, request)),
            "copy_btn": r.copy_btn, "pick": r.pick, "outputs": r.outputs, "on_estimate": on_estimate}


def estimator_form() -> SimpleNamespace:
    """The model (a choice, an uploaded config.json or a described architecture), the card, the job's main settings and,
    folded, the others. Opens on a popular real model with checkpointing on, on this machine's card (estimate_view)."""
    # unmarked while the page is built (no text in one language in its config); marked on load, in the visitor's language
    model = gr.Dropdown(choices=estimate_view.model_choices(online=True), value=estimate_view.DEFAULT_MODEL, allow_custom_value=True,
                        label=T("estimator.model"), info=T("estimator.model_info"), elem_id="estimator-model")
    # (name, id) choices: the value stays the tier id (API callers and the CLI use ids); names in the visitor's language on load
    opening = estimate_view.opening_tier()
    tier = gr.Dropdown(choices=estimate_view.tier_choices(), value=opening, label=T("estimator.card"),
                       info=T("estimator.card_info"), elem_id="estimator-tier")
    main = ["task", "batch", "seq_len", "grad_ckpt", "grad_accum", "new_tokens"]
    defaults = estimate_view.form_defaults(opening)  # the card's training precision (fp16 on a T4)
    comps = make_inputs(MemoryQuery, only=main, values=defaults)
    with gr.Accordion(T("estimator.more_settings"), open=False):
        comps.update(make_inputs(MemoryQuery, skip=("model", *main), values=defaults))
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
        copy_btn = gr.Button(T("estimator.copy"), scale=2, elem_id="estimator-copy")
    chart = gr.HTML(elem_id="estimator-breakdown-chart")
    # widths as shares of the table only (gradio adds a px column to the shares: at 390 px "25%, 64px, 62%" overflowed the phone)
    breakdown = gr.Dataframe(interactive=False, label=T("estimator.breakdown_label"), wrap=True, column_widths=["28%", "16%", "56%"],
                             elem_id="estimator-breakdown")
    with gr.Accordion(T("estimator.cards_table"), open=False):
        tiers = gr.Dataframe(interactive=False, label=T("estimator.cards_label"), wrap=True, elem_id="estimator-verdicts")
    with gr.Accordion(T("estimator.runs_title"), open=False):
        runs_md = gr.Markdown()
        cols = estimate_view.runs_columns()
        runs_plot = gr.ScatterPlot(x=cols[0], y=cols[1], color=cols[4], tooltip=[cols[3], cols[2]], height=240, title=T("estimator.runs_plot"),
                                   show_label=False)
    return SimpleNamespace(outputs=[totals, chart, breakdown, tiers, limits, fit, runs_md, runs_plot, bars], pick=pick, copy_btn=copy_btn,
                           breakdown=breakdown, tiers=tiers)
