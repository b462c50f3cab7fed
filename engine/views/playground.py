"""The Playground panel without its widgets: the generation settings from the form and a decoding preset applied on
them, the request sent to the model (chat or completion, the conversation kept or each prompt on its own), a chat
turn and a comparison as they stream, with the stats line under each; the loaded model's line, regenerate's last
turn, and the tables of the Batch, Evaluate and Export tabs. Every text a person reads is rendered in `lang`
(engine/i18n.py); numbers go through `fmt_number`."""

from __future__ import annotations

import dataclasses
import functools
import math
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..config import GenerationSettings
from ..errors import GenerationError
from ..fields import from_flat
from ..i18n import fmt_number, t
from .choices import NO_ADAPTER
from .uploads import export_path


def split_gen_values(gen_names: list[str], gen_vals: tuple) -> tuple[GenerationSettings, tuple]:
    """The generation settings, and the (adapter, placement, GPU budget) inputs that follow them (optional over the API)."""
    return from_flat(GenerationSettings, dict(zip(gen_names, gen_vals[: len(gen_names)], strict=True))), tuple(gen_vals[len(gen_names):])


def prompt_settings(gen_names: list[str], gen_vals: tuple, prompt: str | None) -> tuple[GenerationSettings, tuple]:
    """split_gen_values for a generation from a prompt, refused when the prompt is empty."""
    settings, extra = split_gen_values(gen_names, gen_vals)
    if prompt is not None and not isinstance(prompt, str):
        raise GenerationError(key="playground.error.not_text", field="prompt", value=repr(prompt))
    if not (prompt or "").strip():
        raise GenerationError(key="playground.error.type_prompt")
    return settings, extra


def compare_settings(settings: GenerationSettings) -> GenerationSettings:
    """The settings for Compare: sampling with a random seed (0) gets a fixed one, the same on both sides, or the two
    answers are not comparable."""
    return dataclasses.replace(settings, seed=1234) if settings.do_sample and settings.seed == 0 else settings


def preset_values(name: str, settings: GenerationSettings, gen_names: list[str]) -> list[Any]:
    """The decoding preset applied on the current settings: the new value of each (dotted) field in gen_names."""
    from ..inference.presets import apply_preset

    new = apply_preset(name, settings)
    return [functools.reduce(getattr, n.split("."), new) for n in gen_names]


def generation_request(mode: str, system: str | None, history: list[dict[str, Any]], prompt: str) -> Any:
    """Chat messages (system prompt, the conversation so far, the new prompt) in chat mode; the raw prompt in completion mode.
    Values an API caller may send wrongly typed are refused with a message naming the field."""
    if mode not in ("chat", "completion"):
        raise GenerationError(key="playground.error.bad_mode", value=repr(mode))
    if system is None:
        system = ""
    if not isinstance(system, str):
        raise GenerationError(key="playground.error.not_text", field="system prompt", value=repr(system))
    if not isinstance(prompt, str):
        raise GenerationError(key="playground.error.not_text", field="prompt", value=repr(prompt))
    if not isinstance(history, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in history):
        raise GenerationError(key="playground.error.bad_history")
    if mode == "chat":
        return ([{"role": "system", "content": system}] if system.strip() else []) + history + [{"role": "user", "content": prompt}]
    return prompt


def chat_turn(loaded: Any, mode: str, system: str, history: list[dict[str, Any]], prompt: str, settings: GenerationSettings,
              stop_event: threading.Event, *, keep: bool = True, lang: str = "en") -> Iterator[tuple[list[dict[str, Any]], str]]:
    """(conversation, stats line) as the answer to `prompt` streams: first with an empty answer and "generating…".
    keep=False: the model sees the new prompt only (and the system prompt), while the earlier turns stay on screen; a
    task model (dates) must answer a second question on its own, not as the continuation of the first."""
    from ..inference.generate import stream_generate

    request = generation_request(mode, system, history if keep else [], prompt)
    if not isinstance(history, list):
        history = []
    history = history + [{"role": "user", "content": prompt}, {"role": "assistant", "content": ""}]
    yield history, t("playground.stats.generating", lang)
    for upd in stream_generate(loaded, request, settings, chat=mode == "chat", stop_event=stop_event):
        history[-1]["content"] = upd.text
        yield history, stats_line(upd, lang)


def side_extra(extra: tuple, side: int) -> tuple:
    """The (adapter, placement, GPU budget) for model A (side 0) or B: the adapter goes on model A only (base + adapter vs base)."""
    return extra if side == 0 else (NO_ADAPTER, *extra[1:])


def compare_turns(load_side: Callable[[int, str], Any], refs: tuple[str, str], request: Any, settings: GenerationSettings, *, chat: bool,
                  stop_event: threading.Event, lang: str = "en") -> Iterator[tuple[str, str, str, str]]:
    """(text A, stats A, text B, stats B) as the two models answer one after the other (loaded by load_side(side, ref)
    in turn, so only one has to fit in memory). Both models must be chosen."""
    from ..inference.generate import stream_generate

    for side, ref in enumerate(refs):
        if ref in (None, ""):
            raise GenerationError(key="playground.error.compare_pick", side="AB"[side])
    texts, lines = ["", ""], ["", ""]
    for side, ref in enumerate(refs):
        if stop_event.is_set():
            break
        lines[side] = t("playground.stats.loading", lang, model=ref)
        yield texts[0], lines[0], texts[1], lines[1]
        loaded = load_side(side, ref)
        for upd in stream_generate(loaded, request, settings, chat=chat, stop_event=stop_event):
            texts[side], lines[side] = upd.text, stats_line(upd, lang)
            yield texts[0], lines[0], texts[1], lines[1]


def stats_line(upd: Any, lang: str = "en") -> str:
    """Tokens, speed, time to first token (and at the end: peak memory, why it ended, notes) of a streamed generation."""
    from ..inference.notes import render_note

    if upd.ttft is None:
        return t("playground.stats.generating", lang)
    info = t("playground.stats.line", lang, tokens=fmt_number(upd.n_tokens, lang), speed=fmt_number(round(upd.tokens_per_s, 1), lang, 1),
             ttft=fmt_number(round(upd.ttft, 2), lang, 2))
    if upd.done and upd.peak_gib:
        info += " · " + t("playground.stats.peak", lang, gib=fmt_number(round(upd.peak_gib, 2), lang, 2))
    if upd.done and upd.finish_reason:
        info += " · " + t(f"playground.stats.ended_{upd.finish_reason}", lang)
    if upd.notes:
        info += " · " + "; ".join(render_note(n, lang) for n in upd.notes)
    return info


def model_info(loaded: Any, lang: str = "en") -> str:
    """What is loaded, how long it took, its footprint, how it is stored and where it runs."""
    from ..hardware.device import dtype_name
    from ..hardware.placement import summarize_device_map

    device = "CPU" if loaded.device.kind == "cpu" else f"{loaded.device.kind} ({loaded.device.name})"
    quant = t(f"playground.info.quant_{loaded.quant.mode.replace('-', '_')}", lang)
    parts = [f"**{loaded.ref}**", t("playground.info.loaded_in", lang, seconds=fmt_number(round(loaded.load_seconds, 1), lang, 1)),
             f"{fmt_number(round(loaded.footprint_gib, 3), lang, 3)} GiB", t("playground.info.runs_on", lang, quant=quant, dtype=dtype_name(loaded.dtype), device=device)]
    if getattr(loaded, "adapter", None):
        parts.append(t("playground.info.adapter", lang))
    split = summarize_device_map(getattr(loaded.model, "hf_device_map", None))  # accelerate's auto placement: what went where
    return " · ".join(parts + ([split] if split.startswith("split:") else []))


def drop_last_turn(history: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], str] | None:
    """For Regenerate: the conversation without its last answer and last prompt, and that prompt's text (None: nothing to regenerate)."""
    history = list(history or [])
    while history and history[-1]["role"] == "assistant":
        history.pop()
    if not history:
        return None
    last = history.pop()
    text = last["content"] if isinstance(last["content"], str) else " ".join(p.get("text", "") for p in last["content"] if isinstance(p, dict))
    return history, text


def whole_number(value: Any, field: str, lo: int, hi: int) -> int:
    """`value` as a whole number in [lo, hi], or a message naming the field (an API caller may send anything)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = float("nan")
    if number != number or number in (float("inf"), float("-inf")) or number != int(number) or not lo <= number <= hi:
        raise GenerationError(key="playground.error.whole_number", field=field, value=repr(value), lo=lo, hi=fmt_number(hi))
    return int(number)


def micro_batch_of(value: Any) -> int:
    """The Batch tab's micro batch (1 to 64)."""
    return whole_number(value, "micro batch", 1, 64)


def batch_updates(loaded: Any, prompts: list[str], settings: GenerationSettings, *, chat: bool, micro_batch: int, stop_event: threading.Event,
                  exports_dir: Path | None = None, lang: str = "en") -> Iterator[tuple[str, dict[str, Any], Path | None]]:
    """(progress line, table, CSV file) as a batch generates; the CSV is written once it is over, under an
    unguessable name in the private exports folder (views/uploads.py; exports_dir: a folder of the caller's instead)."""
    from ..inference.batch import batch_generate, write_csv

    for prog in batch_generate(loaded, prompts, settings, chat=chat, micro_batch=micro_batch, stop_event=stop_event):
        out = None
        if prog.finished or prog.stopped:
            out = exports_dir / f"batch-{secrets.token_urlsafe(12)}.csv" if exports_dir else export_path("batch", ".csv")
            write_csv(prog.rows, out, headers=table_headers("batch", lang)[1:])  # the table's names, without its "#"
        yield batch_line(prog, lang), table("batch", batch_rows(prog), lang), out


def batch_rows(prog: Any) -> list[list[Any]]:
    """The Batch tab's table: #, prompt, output, tokens, seconds."""
    return [[r.index + 1, r.prompt, r.output, r.tokens, round(r.seconds, 2)] for r in prog.rows]


def batch_line(prog: Any, lang: str = "en") -> str:
    """Progress of a batch generation, ending with 'stopped' or 'done' once it is over."""
    from ..inference.notes import render_note

    line = t("playground.batch.line", lang, done=prog.done, total=prog.total, size=prog.micro_batch, seconds=fmt_number(round(prog.elapsed, 1), lang, 1))
    line += "".join(f" · {render_note(n, lang)}" for n in prog.notes)
    if prog.finished or prog.stopped:
        line += " · " + t("playground.batch.stopped" if prog.stopped else "playground.batch.done", lang)
    return line


TABLES = {"batch": ("number", "prompt", "output", "tokens", "seconds"), "eval": ("model", "metric", "value", "details"), "onnx": ("check", "value")}


def table_headers(name: str, lang: str) -> list[str]:
    """The column names of one of the playground's tables (batch, eval, onnx) in `lang`."""
    return [t(f"playground.table.{name}.{column}", lang) for column in TABLES[name]]


def table(name: str, rows: list[list[Any]], lang: str) -> dict[str, Any]:
    """A table's value for the page: its rows under headers in `lang`."""
    return {"headers": table_headers(name, lang), "data": rows}


def model_label(ref: str, extra: tuple, lang: str = "en") -> str:
    """The model's name in the Evaluate table, with its adapter when one is applied (extra: adapter, placement, budget)."""
    return t("playground.eval.with_adapter", lang, model=ref, adapter=extra[0]) if extra and extra[0] not in (None, "", NO_ADAPTER) else ref


def evaluation_row(kind: str, loaded: Any, label: str, text: str | None, dataset: str, window: float, stride: float, lang: str = "en") -> list[Any]:
    """One row of the Evaluate table: perplexity ('ppl': of the text, or of the dataset when the text is empty) or the
    date task's accuracy ('acc')."""
    from ..inference.evaluate import dataset_perplexity, perplexity, task_accuracy

    if kind == "ppl":
        kw = {"window": whole_number(window, "window", 0, 1 << 20) or None, "stride": whole_number(stride, "stride", 0, 1 << 20) or None}
        res = perplexity(loaded, [text], **kw) if (text or "").strip() else dataset_perplexity(loaded, dataset, **kw)
        return [label, t("playground.eval.ppl", lang), round(res.ppl, 3), res.summary(lang)]
    score = task_accuracy(loaded)
    return [label, t("playground.eval.acc", lang), round(score.accuracy, 3), score.summary(lang)]


def evaluation_rows(kind: str, load: Callable[[str, tuple], Any], refs: list[str], extra: tuple, text: str | None, dataset: str, window: float,
                    stride: float, lang: str = "en") -> list[list[Any]]:
    """The Evaluate table: one row per model (A, then B when asked), each loaded by load(ref, extra) in turn; the adapter
    in extra goes on model A only."""
    for ref in refs:
        if ref in (None, ""):
            raise GenerationError(key="playground.error.no_model")
    return [evaluation_row(kind, load(ref, side_extra(extra, side)), model_label(ref, side_extra(extra, side), lang), text, dataset, window, stride, lang)
            for side, ref in enumerate(refs)]


ONNX_ROWS = ("greedy_equal", "max_abs_logits_diff", "prompts", "max_new_tokens", "torch_tokens", "onnx_tokens", "torch_tokens_per_s",
             "onnx_tokens_per_s", "torch_no_cache_tokens_per_s")  # compare_onnx's results, in the table's order (onnx_check.*)


def onnx_rows(result: dict[str, Any], lang: str = "en") -> list[list[str]]:
    """compare_onnx's results as the table's (check, value) rows in words, in `lang`: yes/no, numbers for people."""
    def shown(key: str, value: Any) -> str:
        if isinstance(value, bool):
            return t("onnx_check.yes" if value else "onnx_check.no", lang)
        if key == "max_abs_logits_diff":  # tiny: significant digits, never 1e-06
            return fmt_number(float(value), lang, max(1, min(8, 1 - math.floor(math.log10(value))))) if value > 0 else "0"
        return fmt_number(value if isinstance(value, int) else round(float(value), 1), lang, 1)

    return [[t(f"onnx_check.{k}", lang), shown(k, result[k])] for k in ONNX_ROWS if k in result]


def onnx_export_check(loaded: Any, ref: str, prompts_text: str | None, runs_dir: Path, lang: str = "en") -> tuple[list[list[Any]], Path]:
    """Export the model to ONNX in the exports folder and compare it with PyTorch on the prompts (one a line; "Hello" if
    none): the (check, value) rows in words (onnx_rows), and the zip to download. The zip holds the whole export folder:
    model.onnx, its weights file model.onnx.data (without it the graph loads nowhere), the tokenizer and onnx_info.json."""
    import copy
    import dataclasses

    import torch

    from ..export.merge import zip_export
    from ..export.onnx import compare_onnx, export_onnx

    if loaded.dtype != torch.float32 and loaded.quant.mode == "none":
        # the playground may compute in bf16 (a CPU fast at it); the ONNX file is the portable fp32 model, and it is
        # compared with the same fp32 weights
        loaded = dataclasses.replace(loaded, model=copy.deepcopy(loaded.model).float(), dtype=torch.float32)
    path = export_onnx(loaded, export_path(f"onnx-{ref.replace(':', '-').replace('/', '-')}"), runs_dir=runs_dir)
    prompts = [p for p in (prompts_text or "").splitlines() if p.strip()] or ["Hello"]
    result = compare_onnx(loaded, path, prompts, no_cache_baseline=True)
    return onnx_rows(result, lang), zip_export(path.parent)
