"""Panel 3, the playground's parts: the model and decoding settings, and the Chat, Compare, Batch, Evaluate and Export tabs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from engine import i18n, sharing
from engine.config import GenerationSettings, QuantSettings
from engine.fields import field_specs
from engine.training.jobs import JobManager
from engine.views import choices, playground
from ui.language import T
from ui.widgets import choice_list, make_inputs, named

SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "seed")  # the settings greedy decoding ignores (penalties still apply)


EVAL_DATASET = "builtin:corpus"  # the Evaluate tab's default text: plain paragraphs in both languages


ONNX_PROMPTS = "A memória da GPU\nThe KV cache"  # sample prompts for the ONNX check (data, the same in every language)


def adapter_list(adapters: list[str], none: Any = None) -> list[Any]:
    """The Adapter dropdown's choices: "(none)" named in the visitor's language (`none`: that name, built on the server; by
    default translated in the browser), its value still NO_ADAPTER for the API."""
    none = none or T("text.choice.no_adapter")
    return [(none, a) if a == choices.NO_ADAPTER else a for a in adapters]


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
        quant = gr.Dropdown(choices=choice_list(QuantSettings, "mode", quant_spec.choices), value=quant_spec.default, label=T("field.QuantSettings.mode.label"),
                            info=T("field.QuantSettings.mode.help"), elem_id="playground-quant")
        # 8/4-bit need bitsandbytes (requirements.txt); int8-dynamic is CPU-only: said before anyone picks them
        gr.Markdown(T("playground.loading.needs_bnb"), visible=importlib.util.find_spec("bitsandbytes") is None, elem_id="playground-bnb-note")
        gr.Markdown(T("playground.loading.int8_gpu"), visible=detect_device().kind == "cuda")
        system = gr.Textbox(label=T("playground.loading.system"), info=T("playground.loading.system_info"), lines=2)
        adapter = gr.Dropdown(choices=adapter_list(choices.adapter_choices(jobs, runs=False)), value=choices.NO_ADAPTER, label=T("playground.loading.adapter"),
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
    table = gr.Dataframe(headers=playground.table_headers("batch", "en"), interactive=False, wrap=True, elem_id="playground-batch-table")
    outputs = [status, table, gr.File(label=T("playground.batch.results"), visible=False)]
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
