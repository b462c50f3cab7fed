"""Panel 3, the playground's handlers: chat and compare streams, batch, evaluation, ONNX export, and what the playground
shows for a model (at load, on "Try it", on a pick). Generation streams from a worker thread (engine/inference/generate.py)."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import gradio as gr

from engine import i18n
from engine.errors import EngineError
from engine.training.jobs import JobManager
from engine.views import choices, playground, playground_load
from engine.views.signals import StopSignals
from ui.errors import beside, ui_errors
from ui.language import lang_of, tr
from ui.playground_tabs import SAMPLING_ONLY, adapter_list, onnx_note, preset_help
from ui.session import session_key


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

    def onnx(request: gr.Request, ref_v, prompts_v, owner_v=None):
        ref, loaded = playground_load.load_for_export(jobs, ref_v, allow_local_models=allow_local_models, owner=session_key(owner_v, request))
        rows, path = playground.onnx_export_check(loaded, ref, prompts_v, jobs.runs_dir, lang_of(request))
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
    return gr.update(choices=models), gr.update(choices=models_b), gr.update(choices=adapter_list(adapters, tr("text.choice.no_adapter"))), gr.update(choices=models)


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
        adapters = adapter_list(choices.adapter_choices(jobs), i18n.t("text.choice.no_adapter", lang))
        return [gr.update(choices=models, value=start.model), gr.update(choices=adapters, value=choices.NO_ADAPTER), gr.update(value=start.mode),
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
