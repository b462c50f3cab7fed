"""Datasets: loading, format detection, chat templating, tokenization with prompt masking, chunking.

Pipeline, one way::

    load_records(source)            -> RecordSet      rows + detected format + rows dropped (and why)
    tokenize_records(rs, tok, L)    -> TokenizedData  input_ids / labels / attention_mask + DataReport
    split_eval(examples, f, seed)   -> (train, eval)
    chunk_corpus(texts, tok, L)     -> blocks         concatenate + cut, for pretraining from scratch
    preview(rs, tok, L)             -> rows as the model sees them, trained spans marked ⟦ ⟧ (for the UI)

Formats (detected from the keys/columns of the rows):

- ``text``: ``{"text": ...}`` — plain language modelling; a .txt file gives one row per paragraph.
- ``instruction``: ``instruction`` (+ optional ``input``, ``system``) + ``output`` (or ``response``).
- ``prompt_completion``: ``prompt`` + ``completion`` (strings, or lists of messages as in TRL).
- ``chat``: ``messages`` (``role``/``content``) or ``conversations`` (ShareGPT ``from``/``value``, with
  human → user, gpt → assistant).

The three chat-like formats go through the tokenizer's chat template (the default template of
engine/models/tokenizer.py is added when it has none); the loss covers only the assistant turns, each ending with
the eos token, unless ``train_on_prompt``. Text rows are tokenized as they are, with eos appended.

Files are parsed here with the standard library rather than with `datasets.load_dataset`, because a person
uploading a file needs to hear *which line* is broken and *which columns* were found, and because parsing
a small upload must not write a cache folder. The result is plain Python lists; the trainer packs several
short examples into each row (engine/data/packing.py) or pads them like
`transformers.DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100)`.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Format = Literal["text", "instruction", "prompt_completion", "chat"]
TooLong = Literal["truncate", "drop"]

SAMPLES_DIR = Path(__file__).resolve().parent / "samples"
BUILTIN_FILES: dict[str, str] = {
    "builtin:instructions": "instructions.jsonl",
    "builtin:dates": "dates.jsonl",
    "builtin:corpus": "corpus.txt",
}
BUILTIN_DATASETS: dict[str, str] = {
    "builtin:instructions": "194 short instruction/answer pairs in Portuguese and English (LLMs, GPUs, daily life).",
    "builtin:dates": "600 date conversions DD/MM/YYYY -> YYYY-MM-DD: the scored task (100 held-out test items).",
    "builtin:corpus": "~75 KB of plain paragraphs in Portuguese and English, for pretraining a compact model.",
}

EXTENSIONS: dict[str, str] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "txt",
    ".parquet": "parquet",
}
MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_LINE_BYTES = 10 * 1024 * 1024
IGNORE_INDEX = -100  # label value ignored by the loss (PyTorch cross-entropy / transformers)
TRAINED_OPEN, TRAINED_CLOSE = "⟦", "⟧"  # marks trained-on spans in `preview`

EXPECTED_COLUMNS = (
    "'text' (plain text); 'instruction' + 'output' (optional 'input'); 'prompt' + 'completion'; "
    "'messages' (a list of {role, content}) or 'conversations' (a list of {from, value})"
)
# format -> alternative sets of columns that identify it, in order of preference when a file has several
FORMAT_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "chat": (("messages",), ("conversations",)),
    "instruction": (("instruction", "output"), ("instruction", "response")),
    "prompt_completion": (("prompt", "completion"),),
    "text": (("text",),),
}
ROLE_ALIASES: dict[str, str] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "bot": "assistant",
    "model": "assistant",
}


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


@dataclass
class RecordSet:
    """Rows of a dataset, normalized to its detected format.

    Normalized records: text ``{"text"}``; instruction ``{"instruction", "input", "output"[, "system"]}``;
    prompt_completion ``{"prompt", "completion"}``; chat ``{"messages": [{"role", "content"}, ...]}``.
    `rows[i]` is the 1-based position of `records[i]` in the source (a line, CSV row or JSON item: see
    `unit`); `dropped` lists the rows that could not be used, with the reason.
    """

    records: list[dict[str, Any]]
    format: Format
    source: str
    dropped: list[tuple[int, str]] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    unit: str = "line"
    columns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. columns that fit several formats

    def __post_init__(self) -> None:
        if not self.rows:
            self.rows = list(range(1, len(self.records) + 1))

    def __len__(self) -> int:
        return len(self.records)

    def summary(self) -> str:
        """One line for the UI, e.g. '194 instruction rows from instructions.jsonl (2 dropped)'."""
        text = f"{len(self.records)} {self.format} rows from {_display_name(self.source)}"
        return text + (f" ({len(self.dropped)} dropped)" if self.dropped else "")


@dataclass
class DataReport:
    """What tokenization did to a dataset: counts, lengths and the rows dropped with their reasons."""

    rows_in: int
    rows_kept: int
    dropped: list[tuple[int, str]]
    n_tokens: int
    n_trainable_tokens: int
    max_len: int
    mean_len: float
    length_histogram: dict[str, int]  # "17-32" -> number of kept examples of that many tokens
    truncated: int = 0
    unit: str = "line"
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """A short human-readable summary for logs and the UI."""
        parts = [
            f"{self.rows_kept}/{self.rows_in} rows kept",
            f"{self.n_tokens} tokens ({self.n_trainable_tokens} trained on)",
            f"longest {self.max_len}, mean {self.mean_len:.0f}",
        ]
        if self.truncated:
            parts.append(f"{self.truncated} truncated")
        if self.dropped:
            first = "; ".join(f"{self.unit} {n}: {why}" for n, why in self.dropped[:3])
            parts.append(f"{len(self.dropped)} dropped ({first}{'; ...' if len(self.dropped) > 3 else ''})")
        return ", ".join(parts)


@dataclass
class TokenizedData:
    """Model-ready examples (`input_ids`, `labels`, `attention_mask` as int lists) and their report."""

    examples: list[dict[str, list[int]]]
    report: DataReport
    format: Format = "text"

    def __len__(self) -> int:
        return len(self.examples)


class _BadRow(Exception):
    """A single row cannot be used; it is dropped and reported, the rest of the file goes on."""


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def load_records(source: str, *, columns: dict[str, str] | None = None) -> RecordSet:
    """Read a built-in sample (``builtin:NAME``) or a local file and normalize its rows.

    columns: an optional mapping target -> source column (engine/data/sources.py `parse_columns`) applied
    before format detection. Hub datasets: engine/data/sources.py `load_source`.

    Raises `DataError` with an actionable message when the file as a whole cannot be used (missing,
    empty, unsupported extension, not UTF-8, binary, too big, invalid JSON on some line, no recognizable
    columns, or no usable row). Individually bad rows are dropped and listed in `RecordSet.dropped`.
    """
    raw, unit, name = read_rows(source)
    return _normalize(raw, unit, source, name, columns)


def read_rows(source: str) -> tuple[list[tuple[int, Any]], str, str]:
    """The raw rows of a built-in sample or local file, before normalization: ``(rows, unit, file name)``.

    rows are ``(1-based position, value)`` pairs with every column the file has (normalization keeps only
    the columns of the detected format; engine/data/curriculum.py reads a difficulty column from here).
    """
    path = _resolve(source)
    kind = EXTENSIONS[path.suffix.lower()]
    if kind == "parquet":
        raw, unit = _read_parquet(path), "row"
    else:
        text = _read_text(path, check_lines=kind != "json")
        if kind == "jsonl":
            raw, unit = _parse_jsonl(text, path.name)
        elif kind == "json":
            raw, unit = _parse_json(text, path.name)
        elif kind == "csv":
            delimiter = "\t" if path.suffix.lower() == ".tsv" else None
            raw, unit = _parse_csv(text, path.name, delimiter), "row"
        else:
            raw, unit = _parse_txt(text), "line"
    if not raw:
        raise DataError(f"{path.name} has no rows. Add at least one sample.")
    return raw, unit, path.name


def _display_name(source: str) -> str:
    return source if source.startswith(("builtin:", "hub:")) else Path(source).name


def _resolve(source: str) -> Path:
    source = (source or "").strip()
    if not source:
        raise DataError("No dataset given. Choose a built-in sample or upload a file.")
    if source.startswith("builtin:"):
        if source not in BUILTIN_FILES:
            raise DataError(f"Unknown built-in dataset {source!r}. Available: {', '.join(BUILTIN_FILES)}.")
        return SAMPLES_DIR / BUILTIN_FILES[source]
    path = Path(source)
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        hint = " Excel workbooks: save as 'CSV UTF-8' first." if suffix in (".xlsx", ".xls", ".ods") else ""
        raise DataError(
            f"{path.name}: unsupported file type {suffix or '(no extension)'!r}. "
            f"Use one of: {', '.join(EXTENSIONS)}.{hint}"
        )
    if not path.exists():
        raise DataError(f"Dataset file not found: {path.name}. Upload it again.")
    if not path.is_file():
        raise DataError(f"{path.name} is not a file.")
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{path.name} is empty (0 bytes).")
    if size > MAX_FILE_BYTES:
        raise DataError(
            f"{path.name} is {size / 2**20:.0f} MB; the limit is {MAX_FILE_BYTES // 2**20} MB. "
            "Use a sample of the data (a few thousand rows are plenty for a LoRA fine-tune)."
        )
    return path


def _read_text(path: Path, *, check_lines: bool) -> str:
    """Bytes -> str with the checks a person needs to hear about: binary, encoding, huge lines."""
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(f"{path.name} is encoded as UTF-16. Re-save it as UTF-8.")
    if b"\x00" in data[:65536]:
        raise DataError(
            f"{path.name} looks like a binary file, not text (it contains NUL bytes). "
            f"Upload a text file ({', '.join(e for e in EXTENSIONS if e != '.parquet')}) or a .parquet file."
        )
    # utf-8-sig when there is a byte-order mark (Excel and Notepad write one), otherwise strict utf-8
    encoding = "utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(
            f"{path.name} is not UTF-8 text: byte 0x{data[err.start]:02x} on line {line} cannot be decoded. "
            "It was probably saved as Latin-1/Windows-1252 (common for CSV exported by Excel). "
            "Re-save it as UTF-8 (Excel: 'CSV UTF-8'; text editors: 'Save with encoding UTF-8')."
        ) from None
    if not text.strip():
        raise DataError(f"{path.name} is empty (only whitespace).")
    if check_lines:
        _check_line_lengths(data, path.name)
    return text


def _check_line_lengths(data: bytes, name: str) -> None:
    start, line = 0, 1
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if end - start > MAX_LINE_BYTES:
            raise DataError(
                f"{name}: line {line} is {(end - start) / 2**20:.1f} MB; the limit is "
                f"{MAX_LINE_BYTES // 2**20} MB per line. Split very long samples or check the line endings."
            )
        start, line = end + 1, line + 1


def _parse_jsonl(text: str, name: str, *, allow_array: bool = True) -> tuple[list[tuple[int, Any]], str]:
    if allow_array and text.lstrip().startswith("["):  # a JSON array saved as .jsonl: read it as one
        return _parse_json(text, name)
    rows = []
    # split on "\n" only: str.splitlines() would also split inside JSON strings at U+2028 and friends
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            raise DataError(
                f"{name}: line {number} is not valid JSON ({err.msg} at column {err.colno}). "
                'Each line of a .jsonl file must be one JSON object, e.g. {"instruction": "...", "output": "..."}.'
            ) from None
    return rows, "line"


def _parse_json(text: str, name: str) -> tuple[list[tuple[int, Any]], str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # several values one after another: JSON Lines with a .json name
            return _parse_jsonl(text, name, allow_array=False)
        raise DataError(f"{name}: invalid JSON on line {err.lineno}, column {err.colno} ({err.msg}).") from None
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if isinstance(data.get("data"), list):
            data = data["data"]
        elif len(lists) == 1:
            data = next(iter(lists.values()))
        else:
            raise DataError(
                f'{name}: expected a list of objects or {{"data": [...]}}; found an object with keys '
                f"{', '.join(map(repr, list(data)[:10]))}."
            )
    if not isinstance(data, list):
        raise DataError(f'{name}: expected a list of objects or {{"data": [...]}}, found {type(data).__name__}.')
    return list(enumerate(data, start=1)), "item"


def _parse_csv(text: str, name: str, delimiter: str | None = None) -> list[tuple[int, Any]]:
    delimiter = delimiter or _guess_delimiter(text)
    csv.field_size_limit(MAX_LINE_BYTES)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    if not reader.fieldnames or not any((f or "").strip() for f in reader.fieldnames):
        raise DataError(f"{name}: the first line must be a header naming the columns (e.g. instruction,output).")
    width = len(reader.fieldnames)
    rows: list[tuple[int, Any]] = []
    try:
        for number, row in enumerate(reader, start=1):
            if None in row:  # more cells than header columns: a stray delimiter or an unquoted field
                rows.append((number, _BadRow(f"{width + len(row[None])} cells for {width} columns")))
            elif any(v not in (None, "") for v in row.values()):
                rows.append((number, row))
    except csv.Error as err:
        raise DataError(f"{name}: malformed CSV near line {reader.line_num}: {err}.") from None
    return rows


def _guess_delimiter(text: str) -> str:
    """The most frequent of , ; tab | in the header line (Excel in Portuguese locales writes ';').

    The header is used rather than csv.Sniffer on the whole sample, which is easily fooled by
    punctuation inside long text cells.
    """
    header = text.lstrip("\ufeff").split("\n", 1)[0]
    counts = {d: header.count(d) for d in (",", ";", "\t", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _parse_txt(text: str) -> list[tuple[int, Any]]:
    """One row per paragraph (blocks separated by blank lines); the row number is its first line."""
    rows: list[tuple[int, Any]] = []
    block: list[str] = []
    start = 1
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            rows.append((start, {"text": "\n".join(block).strip()}))
            block = []
    if block:
        rows.append((start, {"text": "\n".join(block).strip()}))
    return rows


def _read_parquet(path: Path) -> list[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow comes with datasets
        raise DataError("Reading .parquet files needs the 'pyarrow' package. Upload .jsonl or .csv instead.") from None
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several unrelated types for a corrupt file
        raise DataError(f"{path.name} is not a readable Parquet file ({type(err).__name__}: {err}).") from None
    return list(enumerate(table.to_pylist(), start=1))


# --------------------------------------------------------------------------------------------------
# Format detection and normalization
# --------------------------------------------------------------------------------------------------


def _lower_keys(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        out.setdefault(str(key).strip().lower(), value)
    return out


def _detect_format(rows: Sequence[dict[str, Any]]) -> Format | None:
    """The format whose columns most sampled rows have; ties go to the more structured format."""
    sample = rows[:500]
    best: tuple[int, str] | None = None
    for fmt, alternatives in FORMAT_KEYS.items():  # dict order = preference order
        count = sum(any(all(k in row for k in keys) for keys in alternatives) for row in sample)
        if count and (best is None or count > best[0]):
            best = (count, fmt)
    return best[1] if best else None  # type: ignore[return-value]


def _normalize(raw: list[tuple[int, Any]], unit: str, source: str, name: str, mapping: dict[str, str] | None = None) -> RecordSet:
    dropped: list[tuple[int, str]] = []
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, row in raw:
        if isinstance(row, _BadRow):
            dropped.append((number, str(row)))
        elif isinstance(row, str):  # a list of strings is a plain-text dataset
            rows.append((number, {"text": row}))
        elif isinstance(row, dict):
            rows.append((number, _lower_keys(row)))
        else:
            dropped.append((number, f"not an object (found {type(row).__name__})"))
    counts = Counter(key for _, row in rows for key in row)
    columns = [key for key, _ in counts.most_common()]
    from . import sources  # column mapping and its messages live there (it imports this module)

    notes: list[str] = []
    if mapping:  # the mapping's targets decide the format
        rows, fmt = sources.apply_columns(rows, mapping, columns, name)
    else:
        fmt = _detect_format([row for _, row in rows])
        if fmt is None:
            raise DataError(sources.no_format_message(name, columns))
        note = sources.ambiguity_note([row for _, row in rows], fmt)
        notes = [note] if note else []
    normalizer = _NORMALIZERS[fmt]
    records, kept_rows = [], []
    for number, row in rows:
        try:
            records.append(normalizer(row))
            kept_rows.append(number)
        except _BadRow as why:
            dropped.append((number, str(why)))
    dropped.sort()
    if not records:
        reasons = "; ".join(f"{unit} {n}: {why}" for n, why in dropped[:5])
        raise DataError(f"{name}: none of the {len(raw)} rows can be used as {fmt} data ({reasons}).")
    return RecordSet(records, fmt, source, dropped, kept_rows, unit, columns, notes)


def _as_text(row: dict[str, Any], key: str, *, required: bool) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and value != value):  # None or NaN (pandas/parquet)
        value = ""
    elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _BadRow(f"'{key}' is not text (found {type(value).__name__})")
    value = str(value)
    if required and not value.strip():
        raise _BadRow(f"empty '{key}'" if key in row else f"missing '{key}'")
    return value


def _norm_text(row: dict[str, Any]) -> dict[str, Any]:
    return {"text": _as_text(row, "text", required=True)}


def _norm_instruction(row: dict[str, Any]) -> dict[str, Any]:
    out_key = "output" if "output" in row or "response" not in row else "response"
    record = {
        "instruction": _as_text(row, "instruction", required=True),
        "input": _as_text(row, "input", required=False),
        "output": _as_text(row, out_key, required=True),
    }
    system = _as_text(row, "system", required=False)
    if system.strip():
        record["system"] = system
    return record


def _norm_prompt_completion(row: dict[str, Any]) -> dict[str, Any]:
    record = {}
    for key, role in (("prompt", "user"), ("completion", "assistant")):
        value = row.get(key)
        if isinstance(value, list):  # conversational prompt/completion (TRL style)
            record[key] = _norm_messages(value, need_assistant=role == "assistant", trim=False)
            if not record[key]:
                raise _BadRow(f"empty '{key}'")
        else:
            record[key] = _as_text(row, key, required=True)
    return record


def _norm_chat(row: dict[str, Any]) -> dict[str, Any]:
    key = "messages" if "messages" in row else "conversations"
    value = row.get(key)
    if isinstance(value, str):  # a CSV cell holding JSON
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _BadRow(f"'{key}' is text, not a list of messages") from None
    if not isinstance(value, list) or not value:
        raise _BadRow(f"'{key}' must be a non-empty list of messages")
    return {"messages": _norm_messages(value, need_assistant=True, trim=True)}


def _norm_messages(messages: list[Any], *, need_assistant: bool, trim: bool) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for turn, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise _BadRow(f"message {turn} is not an object")
        message = _lower_keys(message)
        role_raw = message.get("role", message.get("from"))
        role = ROLE_ALIASES.get(str(role_raw).strip().lower()) if role_raw is not None else None
        if role is None:
            raise _BadRow(f"message {turn} has unknown role {role_raw!r} (expected system, user or assistant)")
        content = _flatten_content(message.get("content", message.get("value")))
        if content is None:
            raise _BadRow(f"message {turn} has no text content")
        if not content.strip():
            if role == "system":
                continue
            raise _BadRow(f"message {turn} ({role}) is empty")
        out.append({"role": role, "content": content})
    if trim:
        # trailing user turns have nothing to learn from; a leading assistant turn (a canned greeting)
        # has no prompt to answer, and many templates reject a conversation that starts with one
        while out and out[-1]["role"] != "assistant":
            out.pop()
        first_user = next((i for i, m in enumerate(out) if m["role"] == "user"), len(out))
        out = [m for i, m in enumerate(out) if i >= first_user or m["role"] == "system"]
    if need_assistant and not any(m["role"] == "assistant" for m in out):
        raise _BadRow("no assistant message")
    return out


def _flatten_content(content: Any) -> str | None:
    """Message content as text; a list of parts ([{"type": "text", "text": ...}]) is joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        texts += [p for p in content if isinstance(p, str)]
        return "".join(texts) if texts else None
    return None


_NORMALIZERS = {
    "text": _norm_text,
    "instruction": _norm_instruction,
    "prompt_completion": _norm_prompt_completion,
    "chat": _norm_chat,
}


def to_messages(record: dict[str, Any], fmt: Format) -> list[dict[str, str]]:
    """Chat messages of an instruction / prompt_completion / chat record.

    Instruction and input are joined with a blank line into the user turn; an optional `system` field
    becomes a system turn.
    """
    if fmt == "instruction":
        user = str(record["instruction"])
        extra = str(record.get("input") or "")
        if extra.strip():
            user = f"{user}\n\n{extra}"
        messages = [{"role": "system", "content": str(record["system"])}] if record.get("system") else []
        output = record.get("output", record.get("response", ""))
        return messages + [{"role": "user", "content": user}, {"role": "assistant", "content": str(output)}]
    if fmt == "prompt_completion":
        prompt, completion = record["prompt"], record["completion"]
        head = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        tail = list(completion) if isinstance(completion, list) else [{"role": "assistant", "content": str(completion)}]
        return head + tail
    if fmt == "chat":
        return [dict(m) for m in record["messages"]]
    raise ValueError(f"to_messages needs a chat-like format, not {fmt!r}")


def record_texts(recordset: RecordSet) -> list[str]:
    """Plain texts of a record set (e.g. to train a tokenizer on it): the text of text rows, the joined
    message contents of chat-like rows."""
    if recordset.format == "text":
        return [r["text"] for r in recordset.records]
    return ["\n".join(m["content"] for m in to_messages(r, recordset.format)) for r in recordset.records]


# --------------------------------------------------------------------------------------------------
# Tokenization
# --------------------------------------------------------------------------------------------------


def tokenize_records(
    recordset: RecordSet,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_len: int,
    *,
    train_on_prompt: bool = False,
    too_long: TooLong = "truncate",
) -> TokenizedData:
    """Turn records into model-ready examples.

    Chat-like formats: rendered with the tokenizer's chat template (the default one is added to a
    tokenizer that has none, and a missing pad token falls back to eos); labels are `IGNORE_INDEX` except
    on assistant turns (every token when `train_on_prompt`). Each assistant turn's labels end with the eos
    token: the template's own when it writes it, otherwise eos is inserted after the turn. Text format:
    the text plus eos, every token trained.

    Rows longer than `max_seq_len` are cut (`too_long="truncate"`, counted in `report.truncated`) or
    dropped (`"drop"`); rows left with nothing to train on are dropped. All drops are reported.
    """
    _check_options(max_seq_len, too_long)
    notes = _prepare_tokenizer(tokenizer, recordset.format)
    examples: list[dict[str, list[int]]] = []
    dropped = list(recordset.dropped)
    truncated = 0
    for number, record in zip(recordset.rows, recordset.records, strict=True):
        try:
            ids, labels, was_cut = _encode_record(
                record, recordset.format, tokenizer, max_seq_len, train_on_prompt, too_long
            )
        except _BadRow as why:
            dropped.append((number, str(why)))
            continue
        truncated += was_cut
        examples.append({"input_ids": ids, "labels": labels, "attention_mask": [1] * len(ids)})
    dropped.sort()
    if not examples:
        reasons = "; ".join(f"{recordset.unit} {n}: {why}" for n, why in dropped[:5])
        raise DataError(f"No usable rows left in {_display_name(recordset.source)} after tokenization ({reasons}).")
    report = _report(examples, dropped, len(recordset.records) + len(recordset.dropped), truncated, max_seq_len)
    report.unit, report.notes = recordset.unit, notes
    return TokenizedData(examples, report, recordset.format)


def _check_options(max_seq_len: int, too_long: str) -> None:
    if not isinstance(max_seq_len, int) or max_seq_len < 2:
        raise ConfigError("max_seq_len", max_seq_len, "a whole number of tokens, at least 2")
    if too_long not in ("truncate", "drop"):
        raise ConfigError("too_long", too_long, "'truncate' or 'drop'")


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, fmt: Format) -> list[str]:
    from ..models.tokenizer import ensure_chat_template

    notes = []
    if fmt != "text" and ensure_chat_template(tokenizer):
        notes.append("The tokenizer had no chat template; the default <|user|>/<|assistant|> template was added.")
    if tokenizer.eos_token_id is None:
        notes.append("The tokenizer has no eos token: the model cannot learn where an answer ends.")
    return notes


def _encode_record(
    record: dict[str, Any],
    fmt: Format,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_len: int,
    train_on_prompt: bool,
    too_long: str,
) -> tuple[list[int], list[int], bool]:
    """(input_ids, labels, truncated?) of one record; raises _BadRow when it must be dropped."""
    if fmt == "text":
        ids = _encode_text(record["text"], tokenizer)
        labels = list(ids)
    else:
        ids, labels = _encode_chat(to_messages(record, fmt), tokenizer, train_on_prompt)
    was_cut = False
    if len(ids) > max_seq_len:
        if too_long == "drop":
            raise _BadRow(f"{len(ids)} tokens, longer than max_seq_len {max_seq_len}")
        ids, labels, was_cut = ids[:max_seq_len], labels[:max_seq_len], True
    # labels are shifted inside the model: position 0 is never a target
    if not any(label != IGNORE_INDEX for label in labels[1:]):
        if was_cut:
            raise _BadRow(f"the prompt alone fills max_seq_len ({max_seq_len} tokens); nothing left to train on")
        raise _BadRow("no tokens to train on")
    return ids, labels, was_cut


def _encode_text(text: str, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    return _encode_texts([text], tokenizer)


def _encode_texts(texts: list[str], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids of the texts one after another, each followed by eos (batched: much faster)."""
    if not texts:
        return []
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    # add_special_tokens=True lets tokenizers that expect a bos (Llama, Gemma) get it; ours adds nothing.
    for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]:
        stream.extend(ids)
        if eos is not None and (not ids or ids[-1] != eos):
            stream.append(eos)
    return stream


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    from jinja2.exceptions import TemplateError

    try:
        out = tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=True
        )
    except (TemplateError, ValueError, TypeError) as err:
        raise _BadRow(f"the chat template rejected this conversation: {err}") from None
    return list(out["input_ids"])


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _assistant_spans(
    messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, full: list[int]
) -> list[tuple[int, int]]:
    """Token spans [start, end) of the assistant turns inside `full`.

    start = length of the conversation up to the turn rendered with the generation prompt; end = length
    of the conversation including the turn. Templates are normally prefix-stable; when one is not, the
    common prefix with `full` is used so that masking never covers tokens that differ.
    """
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], True) if i else []
        upto = full if i == len(messages) - 1 else _render(tokenizer, messages[: i + 1], False)
        start = _common_prefix(before, full)
        end = max(start, _common_prefix(upto, full))
        spans.append((start, end))
    return spans


def _encode_chat(
    messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, train_on_prompt: bool
) -> tuple[list[int], list[int]]:
    full = _render(tokenizer, messages, False)
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    labels: list[int] = []

    def add(tokens: Sequence[int], trained: bool) -> None:
        ids.extend(tokens)
        labels.extend(tokens if trained or train_on_prompt else [IGNORE_INDEX] * len(tokens))

    cursor = 0
    for start, end in _assistant_spans(messages, tokenizer, full):
        add(full[cursor:start], False)
        answer = full[start:end]
        if eos is not None and eos in answer:
            # train up to and including the template's eos; what follows it ("\n") is format, not answer
            cut = len(answer) - answer[::-1].index(eos)
            add(answer[:cut], True)
            add(answer[cut:], False)
        else:
            # the template does not end turns with the tokenizer's eos: add it, or the model never stops
            add(answer, True)
            if eos is not None:
                add([eos], True)
        cursor = end
    add(full[cursor:], False)
    return ids, labels


def _histogram(lengths: Sequence[int], max_seq_len: int) -> dict[str, int]:
    edges = [16]
    while edges[-1] < max(max_seq_len, max(lengths, default=1)):
        edges.append(edges[-1] * 2)
    buckets: dict[str, int] = {}
    lo = 1
    for hi in edges:
        buckets[f"{lo}-{hi}"] = sum(lo <= n <= hi for n in lengths)
        lo = hi + 1
    return buckets


def _report(
    examples: list[dict[str, list[int]]], dropped: list[tuple[int, str]], rows_in: int, truncated: int, max_seq_len: int
) -> DataReport:
    lengths = [len(e["input_ids"]) for e in examples]
    return DataReport(
        rows_in=rows_in,
        rows_kept=len(examples),
        dropped=dropped,
        n_tokens=sum(lengths),
        n_trainable_tokens=sum(sum(1 for x in e["labels"][1:] if x != IGNORE_INDEX) for e in examples),
        max_len=max(lengths, default=0),
        mean_len=sum(lengths) / len(lengths) if lengths else 0.0,
        length_histogram=_histogram(lengths, max_seq_len),
        truncated=truncated,
    )


# --------------------------------------------------------------------------------------------------
# Pretraining blocks, eval split, preview
# --------------------------------------------------------------------------------------------------


def chunk_corpus(
    texts: Iterable[str], tokenizer: PreTrainedTokenizerBase, block_size: int
) -> list[dict[str, list[int]]]:
    """Concatenate the texts (each followed by eos) and cut the stream into blocks of `block_size`.

    The standard recipe for pretraining from scratch: no padding is wasted and every block is a
    continuation task. Blocks may start mid-document and attend across the eos between two documents;
    that is the accepted trade-off of this recipe. The last, shorter block is kept when it has at least two
    tokens (one target). Labels equal input_ids.
    """
    if not isinstance(block_size, int) or block_size < 2:
        raise ConfigError("block_size", block_size, "a whole number of tokens, at least 2")
    stream: list[int] = []
    batch: list[str] = []
    for text in texts:
        if text and text.strip():
            batch.append(text)
        if len(batch) >= 1000:
            stream.extend(_encode_texts(batch, tokenizer))
            batch = []
    stream.extend(_encode_texts(batch, tokenizer))
    if not stream:
        raise DataError("The corpus has no text to train on.")
    blocks = []
    for start in range(0, len(stream), block_size):
        block = stream[start : start + block_size]
        if len(block) >= 2:
            blocks.append({"input_ids": block, "labels": list(block), "attention_mask": [1] * len(block)})
    return blocks


def split_eval(examples: Sequence[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """Hold out about `fraction` of the examples for evaluation (at least one when fraction > 0 and
    there are two or more examples; the training part is never empty). Both parts keep the input order."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError("eval_fraction", fraction, "a fraction from 0 up to (not including) 1")
    n = len(examples)
    n_eval = round(n * fraction)
    if fraction > 0 and n >= 2:
        n_eval = min(max(1, n_eval), n - 1)
    else:
        n_eval = 0
    order = list(range(n))
    random.Random(seed).shuffle(order)
    held = set(order[:n_eval])
    train = [ex for i, ex in enumerate(examples) if i not in held]
    evals = [ex for i, ex in enumerate(examples) if i in held]
    return train, evals


def preview(
    recordset: RecordSet,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_len: int,
    n: int = 3,
    *,
    train_on_prompt: bool = False,
    too_long: TooLong = "truncate",
) -> list[dict[str, Any]]:
    """The first `n` rows exactly as the model sees them, trained-on spans wrapped in ⟦ ⟧.

    Each item: ``row`` (position in the source), ``text`` (decoded with special tokens, marked),
    ``n_tokens``, ``n_trainable``, ``truncated`` and ``dropped`` (the reason, or None).
    """
    _check_options(max_seq_len, too_long)
    _prepare_tokenizer(tokenizer, recordset.format)
    items = []
    for number, record in list(zip(recordset.rows, recordset.records, strict=True))[: max(0, n)]:
        item: dict[str, Any] = {
            "row": number,
            "text": "",
            "n_tokens": 0,
            "n_trainable": 0,
            "truncated": False,
            "dropped": None,
        }
        try:
            ids, labels, was_cut = _encode_record(
                record, recordset.format, tokenizer, max_seq_len, train_on_prompt, too_long
            )
        except _BadRow as why:
            item["dropped"] = str(why)
            items.append(item)
            continue
        item.update(
            text=_marked_text(ids, labels, tokenizer),
            n_tokens=len(ids),
            n_trainable=sum(1 for x in labels[1:] if x != IGNORE_INDEX),
            truncated=was_cut,
        )
        items.append(item)
    return items


def _marked_text(ids: list[int], labels: list[int], tokenizer: PreTrainedTokenizerBase) -> str:
    parts = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or (labels[i] != IGNORE_INDEX) != (labels[start] != IGNORE_INDEX):
            text = tokenizer.decode(ids[start:i], skip_special_tokens=False)
            parts.append(f"{TRAINED_OPEN}{text}{TRAINED_CLOSE}" if labels[start] != IGNORE_INDEX else text)
            start = i
    return "".join(parts)
