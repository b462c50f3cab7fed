"""Streaming text generation over transformers' `generate` (playground and `python -m engine generate`).

`stream_generate` runs `model.generate` in a worker thread with a light token collector (`_TokenStream`) and
yields a `GenerationUpdate` with the new printable text at most every `_MIN_UPDATE_S` (whole words: a partial
word is held back until it is complete), then one final update with `done=True` that carries the rest of the text,
the exact token count and the peak memory. The concatenation of every `new_text` equals the final `text`.

- Prompts: a list of chat messages goes through the tokenizer's chat template with the generation prompt; a
  string is one user message (chat=True) or raw text to continue (chat=False) (engine/inference/decoding.py).
- Context: max_new_tokens is clamped to what is left of the model's context (reported in `notes`); a prompt
  that does not leave room for one token is a GenerationError.
- Stop: a StoppingCriteria polls the caller's `threading.Event` after every token, so Stop ends the
  generation at once. The worker thread is always joined: if the consumer stops iterating (a closed
  gradio stream), the generator's `finally` sets the event and waits for the worker.
- Seed: `settings.seed > 0` seeds torch's *global* RNG in the worker (HF `generate` samples from it and
  takes no generator). Two generations at once in one process would share that RNG, so a seed is only
  reproducible when generations do not overlap; the UI allows one generation per device at a time
  (`concurrency_limit`), which also keeps them from competing for the GPU.
- End of answer: the model's eos and end-of-turn ids, or a stop string (the settings' plus the caller's); the
  prompt encoding, end ids, stop criteria and generate kwargs are engine/inference/decoding.py's, shared with
  engine/inference/batch.py.
- Presets: engine/inference/presets.py reads the named decoding presets of presets/generation.yaml.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import GenerationSettings
from ..errors import EngineError, GenerationError
from ..hardware.device import peak_memory_gib, reset_peak
from ..models.loading import LoadedModel
from .decoding import StopOnEvent, encode_prompt, end_token_ids, generate_kwargs, merged_stop_strings
from .notes import Note

_POLL_S = 0.1  # how often the consumer checks that the worker is still alive while waiting for text
_MIN_UPDATE_S = 0.04  # at most ~25 text updates per second: smooth to the eye, and nearly free for generate


@dataclass
class GenerationUpdate:
    """One step of a streamed generation."""

    text: str  # everything generated so far (prompt excluded)
    new_text: str  # what this update added to `text`
    n_tokens: int  # tokens generated so far (the final update counts exactly, eos included)
    elapsed: float  # seconds since the request started
    ttft: float | None  # seconds to the first generated token (includes templating and the prefill)
    tokens_per_s: float  # decode speed: tokens after the first / time after the first (0.0 until 2 tokens)
    done: bool = False
    peak_gib: float | None = None  # final update only: peak memory (CUDA allocated, or process peak RSS on CPU)
    prompt_tokens: int = 0
    max_new_tokens: int = 0  # after clamping to the context
    finish_reason: str | None = None  # final update only: "eos", "length" or "stopped"
    notes: list[str] = field(default_factory=list)


class _TokenStream:
    """A `generate` streamer that only collects the generated token ids (in the worker thread).

    Why not transformers' TextIteratorStreamer: it decodes the whole answer again after every token and wakes
    the consumer through a queue for every word, in the thread that runs `generate` and under the GIL. On a
    small model, where a decoding step is a millisecond or two, that cost 5-25% of the tokens/s
    (bench/generation.py). Here `put` is a list append; the consumer decodes at its own pace, at most once per
    `_MIN_UPDATE_S`, which is also as often as a person can see the text change.
    """

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.n_tokens = 0
        self.first_token_at: float | None = None
        self.finished = threading.Event()
        self.changed = threading.Event()  # set on every new token and at the end
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first puts the prompt ids
            self._prompt_seen = True
            return
        ids = value.reshape(-1).tolist()
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.ids.extend(ids)
        self.n_tokens += len(ids)
        self.changed.set()

    def end(self) -> None:
        self.finished.set()
        self.changed.set()


def _printable(text: str) -> str:
    """The part of a partial answer that is safe to show: whole words (a word's last token may still change
    how it decodes, and an incomplete UTF-8 character decodes as U+FFFD), as TextIteratorStreamer does."""
    if not text or text.endswith("\n"):
        return text
    if _is_cjk(text[-1]):  # CJK text has no spaces: each character is a word
        return text
    cut = max(text.rfind(" "), text.rfind("\n"))
    return text[: cut + 1]


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F or 0x3040 <= cp <= 0x30FF or 0xAC00 <= cp <= 0xD7AF)


def stream_generate(
    loaded: LoadedModel,
    prompt: str | list[dict[str, Any]],
    settings: GenerationSettings,
    *,
    chat: bool = True,
    stop_event: threading.Event | None = None,
    stop_strings: list[str] | None = None,
) -> Iterator[GenerationUpdate]:
    """Stream a generation as `GenerationUpdate`s (see the module docstring).

    stop_event: set it (from any thread) to end the generation after the current token.
    stop_strings: optional strings that end the generation once generated (kept in the text), in addition to
    `settings.stop_strings`.
    Raises GenerationError for an empty prompt, a prompt longer than the context, or a failed generate.
    """
    t0 = time.perf_counter()
    model, tokenizer = loaded.model, loaded.tokenizer
    inputs = encode_prompt(loaded, prompt, chat)
    prompt_len = int(inputs["input_ids"].shape[1])
    notes: list[str] = []
    max_new = settings.max_new_tokens
    ctx = loaded.context_length
    if ctx is not None:
        if prompt_len >= ctx:
            raise GenerationError(key="playground.error.prompt_too_long", tokens=prompt_len, ctx=ctx)
        if max_new > ctx - prompt_len:
            notes.append(Note("playground.note.max_new_lowered", old=max_new, new=ctx - prompt_len, ctx=ctx, used=prompt_len))
            max_new = ctx - prompt_len

    from transformers import StoppingCriteriaList

    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    eos_ids = end_token_ids(loaded)
    stop = stop_event if stop_event is not None else threading.Event()
    streamer = _TokenStream()
    stops = merged_stop_strings(settings, stop_strings)
    kwargs = generate_kwargs(settings, max_new, eos_ids, tokenizer.pad_token_id, tokenizer=tokenizer, stop_strings=stops)
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            if settings.seed > 0:
                torch.manual_seed(settings.seed)  # global RNG: see the module docstring
            result["sequences"] = model.generate(
                **inputs,
                **kwargs,
                streamer=streamer,
                stopping_criteria=StoppingCriteriaList([StopOnEvent(stop)]),
            )
        except BaseException as exc:  # re-raised in the consumer; the stream must still end
            result["error"] = exc
            streamer.end()

    reset_peak(loaded.device)
    worker = threading.Thread(target=work, name="stream_generate", daemon=True)
    text, tail = "", ""
    worker.start()
    try:
        while True:
            if not streamer.changed.wait(timeout=_POLL_S):
                if worker.is_alive():
                    continue
                break  # worker died without ending the stream (should not happen: it ends it on error)
            streamer.changed.clear()
            done = streamer.finished.is_set()  # read before the ids: every token is in them once this is set
            ids = streamer.ids[: streamer.n_tokens]  # a consistent snapshot (the worker only appends)
            full = tokenizer.decode(ids, skip_special_tokens=True) if ids else ""
            if done:  # the rest of the text goes out with the final update (done=True)
                tail, text = full[len(text):], full
                break
            shown = _printable(full)
            if len(shown) > len(text):
                chunk, text = shown[len(text):], shown
                yield _update(text, chunk, streamer, t0, prompt_len, max_new, notes)
                # let tokens gather: one decode and one UI update per interval, not per token (no wait before the
                # first word or while a word is incomplete, so the time to first text is not delayed)
                streamer.finished.wait(_MIN_UPDATE_S)  # ...but the end is never waited for
        worker.join()
        if "error" in result:
            exc = result["error"]
            if isinstance(exc, EngineError):
                raise exc
            if isinstance(exc, torch.OutOfMemoryError):
                raise GenerationError(key="playground.error.generate_oom") from exc
            raise GenerationError(key="playground.error.generate_failed", details=f"{type(exc).__name__}: {exc}") from exc
        sequences = result["sequences"]
        generated = sequences[0, prompt_len:]
        n = int(generated.numel())
        if n and int(generated[-1]) in eos_ids:
            reason = "eos"
        elif n >= max_new:
            reason = "length"
        else:
            reason = "stopped"  # the stop event or a stop string
        final = _update(text, tail, streamer, t0, prompt_len, max_new, notes)
        final.n_tokens = n
        final.tokens_per_s = _decode_speed(n, streamer.first_token_at, time.perf_counter())
        final.done = True
        final.finish_reason = reason
        final.peak_gib = peak_memory_gib(loaded.device)
        yield final
    finally:
        # Reached on normal end, on error, and when the consumer closes the generator early (then the
        # worker is still running: stop it after its current token instead of leaking the thread).
        if worker.is_alive():
            stop.set()
        worker.join()


def _decode_speed(n: int, first_at: float | None, now: float) -> float:
    # Always a number (callers format it): 0.0 until a speed can be measured.
    if first_at is None or n < 2 or now <= first_at:
        return 0.0
    return (n - 1) / (now - first_at)


def _update(
    text: str, chunk: str, streamer: Any, t0: float, prompt_len: int, max_new: int, notes: list[str]
) -> GenerationUpdate:
    now = time.perf_counter()
    first = streamer.first_token_at
    return GenerationUpdate(
        text=text,
        new_text=chunk,
        n_tokens=streamer.n_tokens,
        elapsed=now - t0,
        ttft=None if first is None else first - t0,
        tokens_per_s=_decode_speed(streamer.n_tokens, first, now),
        prompt_tokens=prompt_len,
        max_new_tokens=max_new,
        notes=list(notes),
    )


def generate_text(
    loaded: LoadedModel,
    prompt: str | list[dict[str, Any]],
    settings: GenerationSettings,
    chat: bool = True,
) -> str:
    """The whole generated text at once (same path as `stream_generate`), for the CLI and tests."""
    final: GenerationUpdate | None = None
    for update in stream_generate(loaded, prompt, settings, chat=chat):
        final = update
    return final.text if final is not None else ""


# --- named presets ----------------------------------------------------------------------------------


