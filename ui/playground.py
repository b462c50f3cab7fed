"""Panel 3, the Playground panel put together: its parts (playground_tabs, playground_bench), their handlers
(playground_handlers), the API endpoints and their events."""

from __future__ import annotations

import functools
from typing import Any

import gradio as gr

from engine import i18n
from engine.training.bench_job import BenchJobs
from engine.training.jobs import JobManager
from engine.views import choices, playground_load
from engine.views.signals import StopSignals
from ui.errors import ui_errors
from ui.language import T, lang_of, tr
from ui.playground_bench import bench_tab, wire_bench
from ui.playground_handlers import batch_eval_handlers, chat_handlers, model_list_updates, start_handlers
from ui.playground_tabs import SAMPLING_ONLY, batch_tab, chat_tab, compare_tab, evaluate_tab, export_tab, model_settings
from ui.queues import GPU
from ui.session import mark_run_refs


def build_playground(jobs: JobManager, allow_local_models: bool = False, owner: gr.State | None = None) -> dict[str, Any]:
    """The Playground panel. owner: this browser's key (ui/finetune.py), which the run gate asks for (engine/run_access.py)
    and which alone may stop the benchmark it started, when shared. The page is built without any run: models, example and
    compare pair come for each session when it loads the page."""
    from engine.views import playground_defaults as pd

    models = choices.playground_models(jobs, runs=False)
    start, pair = pd.start_for(jobs.runs_dir, pd.DEFAULT_MODEL, "en"), pd.compare_pair(jobs, runs=False)
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
                with gr.Tab(T("bench.tab"), elem_id="bench-tab") as bench_t:
                    bt = bench_tab(models, pair[1] or start.model)
    mark_run_refs(s.model, s.adapter, cmp.model_a, cmp.model_b)  # each endpoint taking one asks the run gate (engine/run_access.py)
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
    owner = owner if owner is not None else gr.State(None)
    api(be.on_onnx, [s.model, x.prompts, owner], x.outputs, "export_onnx", **GPU)
    x.btn.click(be.page_onnx, [s.model, x.prompts, owner], [*x.outputs, x.notice], api_visibility="private", **GPU)
    batch_inputs = [s.model, s.quant, s.mode, b.text, b.file, b.size, *gen, *s.load_extra]
    api(be.on_batch, batch_inputs, b.outputs, "batch_generate", **GPU)
    b.btn.click(be.page_batch, batch_inputs, b.outputs, api_visibility="private", **GPU)
    b.stop.click(h.on_stop, None, None, queue=False)
    eval_inputs = [s.model, cmp.model_a, s.quant, e.both, e.text, e.data, e.window, e.stride, *s.load_extra]
    for kind, btn, name in (("ppl", e.ppl_btn, "perplexity"), ("acc", e.acc_btn, "task_accuracy")):
        api(be.on_eval(kind), eval_inputs, [e.out], name, **GPU)
        btn.click(be.page_eval(kind), eval_inputs, [e.out, e.notice], api_visibility="private", **GPU)
    tabs = [chat_t, compare_t, batch_t, eval_t, export_t]
    bench_load, bench_outputs = wire_bench(BenchJobs(jobs), bt, owner if owner is not None else gr.State(None), allow_local_models)
    bench_t.select(lambda: gr.update(choices=choices.playground_models(jobs)), None, [bt.model], queue=False, api_visibility="private")

    def on_load(request: gr.Request) -> list[Any]:
        # gradio translates a tab's label when the tab is first shown: the others come from the server, in the page's language
        lang = lang_of(request)
        labels = [gr.Tab(label=i18n.t(f"playground.{k}.tab", lang)) for k in ("chat", "compare", "batch", "evaluate", "export")]
        return [*st.on_load(request), *labels, *bench_load(request, bt.model.value)]

    return {"model": s.model, "model_b": cmp.model_b, "model_a": cmp.model_a, "adapter": s.adapter, "lists": lists,
            "try_it": st.try_it, "try_outputs": st.outputs,
            "on_load": on_load, "load_outputs": [*st.outputs, b.outputs[1], e.out, x.outputs[0], x.note, *tabs, *bench_outputs]}
