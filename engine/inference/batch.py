"""Batch generation: many prompts through one model, in memory-safe micro-batches, with a CSV of results.

- `parse_prompts(text, file_path)`: prompts from a textbox (one per line) or an uploaded file (.txt one per
  line; .jsonl / .csv with a `prompt`, `instruction` or `text` column).
- `batch_generate(loaded, prompts, settings)`: yields `BatchProgress` after each micro-batch. Prompts are
  encoded exactly as `engine.inference.generate.stream_generate` encodes them (chat template or raw text), padded on
  the left, and each micro-batch is one `model.generate` call with the same kwargs, eos ids and stop
  strings (the helpers of engine/inference/decoding.py), so greedy outputs equal per-prompt `generate_text` outputs.
  The prompts keep their order (micro-batches are consecutive prompts): the table the UI shows grows from
  the top, in the order the person wrote.
- Out of memory: the micro-batch is halved and the same chunk retried, down to 1 prompt; the smaller size
  is kept for the rest of the run (a size that failed once would likely fail again).
- `write_csv(rows, path)`: prompt, output, tokens, seconds; written to a temporary name, then renamed.

Differences from one-by-one generation, by construction: max_new_tokens is clamped to the context left
after the *longest* prompt of a micro-batch (the batch shares one length); with sampling, a seed makes a
run reproducible for the same micro-batch size but not equal to one-by-one sampling (the rows draw from
one random stream).
"""

from __future__ import annotations

import csv
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import GenerationSettings
from ..errors import EngineError, GenerationError
from ..hardware.device import peak_memory_gib, reset_peak
from ..models.loading import LoadedModel
from .decoding import StopOnEvent, encode_prompt, end_token_ids, generate_kwargs, merged_stop_strings
from .notes import Note

MAX_PROMPTS = 1000
MAX_MICRO_BATCH = 256
MAX_PROMPT_FILE_BYTES = 10 * 2**20  # 1000 prompts of a few KB each; a bigger upload is a mistake
PROMPT_COLUMNS = ("prompt", "instruction", "text")  # looked up in this order, case-insensitively
PROMPT_FILE_TYPES = (".txt", ".jsonl", ".csv")
CSV_COLUMNS = ("prompt", "output", "tokens", "seconds")


@dataclass
class BatchRow:
    """One prompt's result."""

    index: int  # 0-based position of the prompt in the input list
    prompt: str
    output: str
    tokens: int  # generated tokens, eos included (as GenerationUpdate.n_tokens)
    seconds: float  # this row's share of its micro-batch's generation time (the column sums to the total)
    finish_reason: str  # "eos", "length" or "stopped" (a stop string)


@dataclass
class BatchProgress:
    """Progress of a batch run, yielded once before the first micro-batch and after each one."""

    done: int
    total: int
    rows: list[BatchRow]  # every row finished so far, in input order
    micro_batch: int  # the micro-batch size in use (smaller than asked after an out-of-memory halving)
    elapsed: float
    finished: bool = False  # last update: every prompt done, or stopped
    stopped: bool = False  # the stop event ended the run early (rows holds what finished before)
    peak_gib: float | None = None  # last update only: peak memory of the run
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Prompts in, CSV out
# --------------------------------------------------------------------------------------------------


def parse_prompts(text: str | None, file_path: str | None) -> list[str]:
    """Prompts from a textbox (one per non-blank line) or from an uploaded file, not both.

    Files: .txt (one prompt per non-blank line), .jsonl (objects with a prompt/instruction/text key; an
    instruction's optional `input` is appended after a blank line, as in training), .csv (a header with one of
    those columns). Blank prompts are skipped. Raises DataError (an EngineError) naming the problem: no
    prompts, more than 1000, a file type or row without a usable column, a file that is not UTF-8 text.
    """
    from ..errors import DataError

    has_text = bool(text and text.strip())
    if has_text and file_path:
        raise DataError(key="playground.error.batch_text_and_file")
    if file_path:
        prompts = _prompts_from_file(Path(file_path))
        where = DataError(key="playground.error.batch_no_prompts_file", file=Path(file_path).name)
    else:
        prompts = [line.strip() for line in (text or "").splitlines() if line.strip()]
        where = DataError(key="playground.error.batch_no_prompts")
    if not prompts:
        raise where
    if len(prompts) > MAX_PROMPTS:
        raise DataError(key="playground.error.batch_too_many", n=len(prompts), limit=MAX_PROMPTS)
    return prompts


def _prompts_from_file(path: Path) -> list[str]:
    # The readers of engine/data/files.py: they explain encoding problems and broken lines the way a person needs.
    from ..data.files import parse_csv, parse_jsonl, read_text
    from ..errors import DataError

    suffix = path.suffix.lower()
    if suffix not in PROMPT_FILE_TYPES:
        raise DataError(key="playground.error.batch_file_type", file=path.name, suffix=repr(suffix or "(no extension)"),
                        allowed=", ".join(PROMPT_FILE_TYPES))
    if not path.is_file():
        raise DataError(key="playground.error.batch_file_missing", file=path.name)
    if path.stat().st_size > MAX_PROMPT_FILE_BYTES:
        raise DataError(key="playground.error.batch_file_big", file=path.name, mb=MAX_PROMPT_FILE_BYTES // 2**20, limit=MAX_PROMPTS)
    content = read_text(path, check_lines=True)
    if suffix == ".txt":
        return [line.strip() for line in content.splitlines() if line.strip()]
    if suffix == ".jsonl":
        rows, _ = parse_jsonl(content, path.name)
        unit = "line"
    else:
        rows, unit = parse_csv(content, path.name), "row"
    prompts = []
    for number, row in rows:
        prompt = _prompt_of(row)
        if prompt is None:
            keys = ", ".join(map(repr, list(row)[:8])) if isinstance(row, dict) else type(row).__name__
            raise DataError(key=f"playground.error.batch_no_column_{unit}", file=path.name, number=number, found=keys,
                            columns=" / ".join(PROMPT_COLUMNS))
        if prompt.strip():
            prompts.append(prompt.strip())
    return prompts


def _prompt_of(row: Any) -> str | None:
    if isinstance(row, str):  # a .jsonl line that is just a JSON string
        return row
    if not isinstance(row, dict):
        return None
    lowered = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    for key in PROMPT_COLUMNS:
        value = lowered.get(key)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            prompt = str(value)
            extra = lowered.get("input") if key == "instruction" else None
            if isinstance(extra, str) and extra.strip():
                prompt = f"{prompt}\n\n{extra}"  # as engine.data.formats.to_messages joins them for training
            return prompt
    return None


def write_csv(rows: Iterable[BatchRow | dict[str, Any]], path: str | Path, headers: Sequence[str] | None = None) -> Path:
    """Write prompt, output, tokens, seconds per row to `path` atomically; returns the path. `headers`: the names of
    those four columns in the reader's language (the page's), else CSV_COLUMNS.

    UTF-8 with a byte-order mark, so that Excel shows accents right (engine.data.files reads it back either way).
    The file is written under a temporary name in the same folder and renamed, so a crash never leaves a
    half-written CSV that looks complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8-sig", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(list(headers or CSV_COLUMNS))
            for row in rows:
                record = asdict(row) if is_dataclass(row) and not isinstance(row, type) else dict(row)
                if isinstance(record.get("seconds"), float):
                    record["seconds"] = round(record["seconds"], 4)
                writer.writerow([record.get(column, "") for column in CSV_COLUMNS])
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


def _is_oom(exc: BaseException) -> bool:
    # CUDA raises torch.OutOfMemoryError; a CPU allocation failure is a plain RuntimeError with this text.
    return isinstance(exc, torch.OutOfMemoryError) or (isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


def _encode_all(loaded: LoadedModel, prompts: list[str], chat: bool) -> list[list[int]]:
    encoded: list[list[int]] = []
    for number, prompt in enumerate(prompts, start=1):
        try:
            encoded.append(encode_prompt(loaded, prompt, chat)["input_ids"][0].tolist())
        except GenerationError as exc:
            raise GenerationError(key="playground.error.batch_prompt", number=number, reason=str(exc)) from exc
    ctx = loaded.context_length
    if ctx is not None:
        too_long = [i + 1 for i, ids in enumerate(encoded) if len(ids) >= ctx]
        if too_long:
            shown = ", ".join(map(str, too_long[:10])) + (" ..." if len(too_long) > 10 else "")
            raise GenerationError(key="playground.error.batch_too_long", n=len(too_long), ctx=ctx, numbers=shown)
    return encoded


def _finish(tokens: list[int], eos_ids: list[int], pad_id: int, max_new: int) -> tuple[int, str]:
    """(tokens generated, finish reason) of one row of a batched generate output."""
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return i + 1, "eos"
    n = len(tokens)
    while n and tokens[n - 1] == pad_id:  # a row stopped by a stop string is padded to the batch's length
        n -= 1
    return n, ("length" if n >= max_new else "stopped")


def batch_generate(
    loaded: LoadedModel,
    prompts: list[str],
    settings: GenerationSettings,
    *,
    chat: bool = True,
    micro_batch: int = 8,
    stop_event: threading.Event | None = None,
) -> Iterator[BatchProgress]:
    """Generate an answer to every prompt, `micro_batch` prompts per `model.generate` call.

    Yields a BatchProgress before the first micro-batch and after each one (the last has finished=True).
    stop_event: set it to stop at the current token; the interrupted micro-batch is dropped and the last
    update has stopped=True. Raises GenerationError for an empty prompt or one that fills the context (before
    anything runs, naming the prompt), and when even a single prompt does not fit in memory.
    """
    from transformers import StoppingCriteriaList

    t0 = time.perf_counter()
    if isinstance(prompts, str):
        raise GenerationError(key="error.inference.prompts_list")
    prompts = list(prompts)
    if not prompts:
        raise GenerationError(key="playground.error.batch_no_prompts")
    if len(prompts) > MAX_PROMPTS:
        raise GenerationError(key="playground.error.batch_too_many", n=len(prompts), limit=MAX_PROMPTS)
    if isinstance(micro_batch, float) and micro_batch.is_integer():
        micro_batch = int(micro_batch)  # a UI number field may deliver 8.0
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or not 1 <= micro_batch <= MAX_MICRO_BATCH:
        raise EngineError(key="error.inference.micro_batch", value=repr(micro_batch), max=MAX_MICRO_BATCH)
    model, tokenizer = loaded.model, loaded.tokenizer
    encoded = _encode_all(loaded, prompts, chat)
    eos_ids = end_token_ids(loaded)
    pad_id = next((i for i in (tokenizer.pad_token_id, *eos_ids) if i is not None), 0)  # any id: padding is masked
    stops = merged_stop_strings(settings)
    stop = stop_event if stop_event is not None else threading.Event()
    device = next(model.parameters()).device
    ctx = loaded.context_length
    rows: list[BatchRow] = []
    notes: list[str] = []
    size = min(micro_batch, len(prompts))

    def progress(**final: Any) -> BatchProgress:
        return BatchProgress(len(rows), len(prompts), list(rows), size, time.perf_counter() - t0, notes=list(notes), **final)

    reset_peak(loaded.device)
    if settings.seed > 0:
        torch.manual_seed(settings.seed)  # global RNG, as in stream_generate: once for the whole run
    yield progress()
    start = 0
    while start < len(prompts):
        if stop.is_set():
            yield progress(finished=True, stopped=True, peak_gib=peak_memory_gib(loaded.device))
            return
        chunk = encoded[start : start + size]
        width = max(len(ids) for ids in chunk)
        max_new = settings.max_new_tokens if ctx is None else min(settings.max_new_tokens, ctx - width)
        input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in chunk], dtype=torch.long, device=device)
        attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in chunk], dtype=torch.long, device=device)
        kwargs = generate_kwargs(settings, max_new, eos_ids, pad_id, tokenizer=tokenizer, stop_strings=stops)
        t_chunk = time.perf_counter()
        try:
            out = model.generate(
                input_ids=input_ids, attention_mask=attention_mask, stopping_criteria=StoppingCriteriaList([StopOnEvent(stop)]), **kwargs
            )
        except Exception as exc:
            if not _is_oom(exc):
                if isinstance(exc, EngineError):
                    raise
                raise GenerationError(key="playground.error.batch_failed", first=start + 1, last=start + len(chunk),
                                      details=f"{type(exc).__name__}: {exc}") from exc
            del input_ids, attention_mask
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # give the failed attempt's blocks back before retrying smaller
            if size == 1:
                raise GenerationError(key="playground.error.batch_oom", number=start + 1) from exc
            size = (len(chunk) + 1) // 2  # rounded up: 7 -> 4 -> 2 -> 1, no batch is split into a lone straggler
            notes.append(Note("playground.note.batch_halved", n=len(chunk), size=size))
            continue
        if stop.is_set():  # interrupted inside this micro-batch: its rows are cut short, drop them
            yield progress(finished=True, stopped=True, peak_gib=peak_memory_gib(loaded.device))
            return
        seconds = (time.perf_counter() - t_chunk) / len(chunk)
        if max_new < settings.max_new_tokens:
            notes.append(Note("playground.note.batch_max_new", first=start + 1, last=start + len(chunk), new=max_new, ctx=ctx, width=width))
        for offset, generated in enumerate(out[:, width:].cpu().tolist()):
            n, reason = _finish(generated, eos_ids, pad_id, max_new)
            text = tokenizer.decode(generated[:n], skip_special_tokens=True)
            index = start + offset
            rows.append(BatchRow(index, prompts[index], text, n, seconds, reason))
        start += len(chunk)
        if start < len(prompts):
            yield progress()
    yield progress(finished=True, peak_gib=peak_memory_gib(loaded.device))

