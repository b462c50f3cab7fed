"""Panel 2, "Mix adapters": pick two or more of your finished LoRA runs, a method (TIES, DARE, SVD...), weights and density,
and mix them into a new run (a job like training, engine/training/mix_job.py); then the parents' and the mix's scores side
by side. The logic without gradio is engine/views/mix_view.py."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pandas as pd

from engine import run_access
from engine.fields import field_specs
from engine.mix_config import MIX_DENSITY_METHODS, MixConfig
from engine.training.jobs import JobManager
from engine.views import mix_view, run_view
from ui.errors import ui_errors
from ui.language import T, info, lang_of, tr, warning
from ui.queues import JOBS, QUIET
from ui.session import session_key

MAX_PARENTS = 4  # weights on the page for up to four runs (the CLI takes any number)


def _field(name: str) -> dict:
    return {"label": T(f"field.MixConfig.{name}.label"), "info": T(f"field.MixConfig.{name}.help")}


def mix_panel() -> SimpleNamespace:
    """The accordion's components (closed at first): the runs, a weight per run, the method and its settings, Mix, and the
    scores table of the picked mixed run."""
    spec = {s.name: s for s in field_specs(MixConfig)}
    with gr.Accordion(T("mix.ui.title"), open=False, elem_id="mix-panel") as accordion:
        gr.Markdown(T("mix.ui.intro"))
        # filled when the panel opens (this visitor's runs); any name is checked by the engine (it exists, is finished, is theirs)
        parents = gr.Dropdown(choices=[], value=[], multiselect=True, max_choices=MAX_PARENTS, allow_custom_value=True, elem_id="mix-parents",
                              **_field("parents"))
        runs_note = gr.Markdown(elem_id="mix-runs-note")
        with gr.Row():
            weights = [gr.Slider(-2.0, 2.0, value=1.0, step=0.05, label=T("mix.ui.weight"), visible=False, min_width=140, elem_id=f"mix-weight-{i}")
                       for i in range(MAX_PARENTS)]
        with gr.Row():
            combination = gr.Dropdown(choices=list(spec["combination"].choices), value=spec["combination"].default, elem_id="mix-method",
                                      **_field("combination"))
            density = gr.Slider(spec["density"].min, spec["density"].max, value=spec["density"].default, step=spec["density"].step,
                                elem_id="mix-density", **_field("density"))
            svd_rank = gr.Number(value=spec["svd_rank"].default, minimum=0, maximum=spec["svd_rank"].max, precision=0, visible=False,
                                 elem_id="mix-svd-rank", **_field("svd_rank"))
        with gr.Row():
            score = gr.Checkbox(value=spec["score"].default, elem_id="mix-score", **_field("score"))
            name = gr.Textbox(elem_id="mix-name", **_field("run_name"))
        start = gr.Button(T("mix.ui.start"), variant="primary", elem_id="mix-start")
        note = gr.Markdown(T("mix.ui.pick_mix"), elem_id="mix-note")
        table = gr.Dataframe(interactive=False, label=T("mix.ui.compare"), visible=False, elem_id="mix-table")
        compare = gr.Button(T("mix.ui.compare_btn"), size="sm", elem_id="mix-compare")
    timer = gr.Timer(3.0, active=False)  # follows a mix while it runs, asleep otherwise
    return SimpleNamespace(accordion=accordion, parents=parents, runs_note=runs_note, weights=weights, combination=combination, density=density,
                           svd_rank=svd_rank, score=score, name=name, start=start, note=note, table=table, compare=compare, timer=timer)


def wire_mix(m: SimpleNamespace, jobs: JobManager, owner: gr.State, watched: gr.State, run_pick: gr.Dropdown, wake: dict) -> None:
    """The panel's events: the runs this visitor may mix (refreshed when the panel opens), the weights shown per picked run,
    the settings shown per method, Mix (then the run view follows the new run) and the scores table of the picked run."""

    def on_open(owner_v, request: gr.Request):
        runs = mix_view.mixable_runs(jobs, session_key(owner_v, request))
        return gr.update(choices=runs), (tr("mix.ui.no_runs") if len(runs) < 2 else "")

    def on_parents(picked):
        picked = list(picked or [])
        return [gr.update(visible=i < len(picked), label=tr("mix.ui.weight_of", name=picked[i]) if i < len(picked) else tr("mix.ui.weight"))
                for i in range(MAX_PARENTS)]

    def on_method(method):
        return gr.update(visible=method in MIX_DENSITY_METHODS), gr.update(visible=method == "svd")

    @ui_errors
    def on_mix(picked, method, w0, w1, w2, w3, dens, rank, scored, run_name, owner_v, request: gr.Request):
        cfg = mix_view.mix_config(picked, method, [w0, w1, w2, w3], dens, rank, scored, run_name)
        new, message, warnings = mix_view.start(jobs, cfg, session_key(owner_v, request), lang_of(request))
        info(message, request)
        for text in warnings:
            warning(text, request)
        return new, gr.update(choices=run_view.run_choices(jobs), value=new), gr.Timer(active=True)

    def scores(pick, request: gr.Request):
        """The picked run's note and, for a mixed run, its parents' and its own scores side by side (scores any visitor may
        read: the run gate's "inspect", engine/run_access.py)."""
        run_access.check_run_access(jobs.runs_dir, pick, None, "inspect", plain=True, owner_only=jobs.owner_only)
        lang = lang_of(request)
        headers, rows = mix_view.side_by_side(jobs, pick, lang)
        table = gr.update(value=pd.DataFrame(rows, columns=headers), visible=True) if rows else gr.update(visible=False)
        return mix_view.mix_note(jobs, pick, lang), table

    def on_tick(pick, request: gr.Request):
        note, table = scores(pick, request)
        running = bool(pick) and pick == jobs.active()
        return note, table, gr.Timer(active=running)

    gr.on([m.accordion.expand, m.parents.focus], on_open, [owner], [m.parents, m.runs_note], **QUIET, api_visibility="private")
    m.parents.change(on_parents, [m.parents], m.weights, **QUIET, api_visibility="private")
    m.combination.change(on_method, [m.combination], [m.density, m.svd_rank], **QUIET, api_visibility="private")
    inputs = [m.parents, m.combination, *m.weights, m.density, m.svd_rank, m.score, m.name, owner]
    m.start.click(on_mix, inputs, [watched, run_pick, m.timer], api_name="mix_adapters", **JOBS).then(**wake)
    gr.on([m.compare.click, run_pick.change], ui_errors(scores), [run_pick], [m.note, m.table], api_name="mix_scores", **QUIET)
    m.timer.tick(on_tick, [run_pick], [m.note, m.table, m.timer], **QUIET, api_visibility="private")

    def mixable(request: gr.Request) -> list[str]:
        """The finished LoRA runs this caller may mix (on a shared app, only the runs its own session started)."""
        return mix_view.mixable_runs(jobs, session_key(None, request))

    gr.api(ui_errors(mixable), api_name="mix_runs")
