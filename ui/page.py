"""The single gr.Blocks page: the title, the language switch, the guided strip and the three panels, wired together;
launch_options gives demo.launch the languages, theme, head and style."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from engine import i18n, run_access, sharing, space
from engine.errors import EngineError
from engine.training.jobs import JobManager
from engine.views import estimate_view, space_view
from engine.views.offline import handoff_warning
from engine.views.uploads import sweep_uploads
from ui.errors import ui_errors
from ui.estimator import build_estimator
from ui.finetune import build_finetune
from ui.language import I18N, LANG_HEAD, LANG_NOW_JS, T, error, info, lang_of, language_switch, tr, warning
from ui.mcp import mcp_tools
from ui.playground import build_playground
from ui.playground_handlers import model_list_updates
from ui.queues import ESTIMATE
from ui.style import CSS
from ui.widgets import form_update


def launch_options() -> dict[str, Any]:
    """What demo.launch needs besides the address (app.main and the tests): languages, theme, page head and style."""
    return {"i18n": I18N, "theme": gr.themes.Soft(), "head": LANG_HEAD, "css": CSS}


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
        # a Space in demo mode: its limits, where runs are kept (or that they go at a restart), the duplicate link
        space_notice = gr.Markdown(visible=space.demo_mode(), elem_id="space-notice")
        guide = guided_strip()
        with gr.Tabs(selected="est", elem_id="panels") as tabs:
            with gr.Tab(T("estimator.tab"), id="est", elem_id="est-panel") as est_tab:
                est = build_estimator(upload_dir, jobs)
            with gr.Tab(T("finetune.tab"), id="ft", elem_id="ft-panel") as ft_tab:
                ft = build_finetune(jobs, upload_dir, allow_local_models)
            with gr.Tab(T("playground.tab"), id="pg", elem_id="pg-panel") as pg_tab:
                pg = build_playground(jobs, allow_local_models, owner=ft["owner"])
        # every gr.Tabs of the page (the playground's too) wraps its tab buttons onto more lines on a narrow screen
        for block in demo.blocks.values():
            if isinstance(block, gr.Tabs):
                block.overflow_behavior = "wrap"
        for step, tab_id in zip(guide, ("est", "ft", "pg"), strict=True):
            step.click(open_panel(tab_id), None, [tabs], queue=False, api_visibility="private")
        if not sharing.is_shared():
            demo.load(lambda: tr("app.runs_folder", path=str(runs_dir)), None, [notice], queue=False, api_visibility="private")
        if space.demo_mode():
            def on_space_notice(request: gr.Request) -> str:
                return space_view.space_notice_md(runs_dir, lang_of(request))

            demo.load(on_space_notice, None, [space_notice], queue=False, api_name="space_notice")

        form = ft["form"]

        @ui_errors
        def copy_to_finetune(request: gr.Request, pick_n, *vals):
            # the estimator's own check and scope: a config.json of this session's uploads, never another file on the server
            with est["scope"](request):
                values, rank = estimate_view.finetune_values(est["checked_query"](request, vals[0], *vals[2:]), vals[1], pick_n)
            if note := handoff_warning(values.get("base_model"), lang_of(request)):  # offline, a Hub model: say so, offer the built-in one
                warning(note)
            else:
                info(tr("estimator.copied_with", rank=rank) if rank is not None else tr("estimator.copied"))
            # the values, the card they were planned for (its prediction shows beside this machine's), then the Fine-tune tab
            return [*[form_update(c, values[n]) if n in values else gr.skip() for n, c in form.items()], vals[1], gr.Tabs(selected="ft")]

        est["copy_btn"].click(copy_to_finetune, [est["pick"], *est["inputs"]], [*form.values(), ft["card"], tabs], api_name="copy_to_finetune")
        demo.load(est["on_estimate"], est["inputs"], est["outputs"], api_name="estimate", **ESTIMATE)
        demo.load(None, None, [lang_switch], js=LANG_NOW_JS)
        # gradio translates a tab's label when the tab is first shown: the others come from the server, in the page's language
        demo.load(lambda: [gr.Tab(label=tr(f"{k}.tab")) for k in ("estimator", "finetune", "playground")], None, [est_tab, ft_tab, pg_tab],
                  queue=False, api_visibility="private")
        demo.load(ft["on_load"], None, [ft["watched"], ft["run_pick"], ft["history"], ft["form"]["base_model"], ft["form"]["teacher_model"]]).then(
            **ft["wake"])  # the opening run at once (the timer may have gone to sleep before it was set)
        demo.load(ft["init_owner"], [browser_key], [browser_key, ft["owner"]], api_visibility="private", queue=False)
        demo.load(ft["offer"], None, ft["offer_outputs"], api_name="interrupted_run")
        demo.load(ft["predict"], ft["predict_inputs"], [ft["prediction"]], api_name="predict_memory")
        # finished runs appear in the playground as soon as its tab is opened
        pg_tab.select(lambda: model_list_updates(jobs), None, pg["lists"], queue=False)
        # "Try it in the Playground" on a finished run: the playground opens on that run with its example prompt
        @ui_errors
        def on_try(run_name: str | None, request: gr.Request) -> list[Any]:
            if not run_name:
                raise error(tr("finetune.actions.try_none"))
            run_access.check_run_access(jobs.runs_dir, run_name, None, "try", plain=True, owner_only=jobs.owner_only)
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
