"""Dataset formats: detecting the format of raw rows, normalizing them into a `RecordSet`, the column mapping, and
turning records into chat messages. docs/data.md shows every shape a student may bring and what each becomes.

Formats (detected from the keys/columns of the rows):

- ``text``: ``{"text": ...}`` — plain language modelling; a .txt file gives one row per paragraph.
- ``instruction``: ``instruction`` (+ optional ``input`` or Dolly's ``context``, ``system``) + ``output`` (or
  ``response``). The input/context joins the user turn after a blank line.
- ``prompt_completion``: ``prompt`` + ``completion`` (strings, or lists of messages as in TRL).
- ``unpaired``: ``prompt`` + ``completion`` + ``label`` (good/bad: KTO's labelled completions, a chat app's
  thumbs-up/down export). Only KTO trains on it: the other methods refuse it rather than learn the bad answers.
- ``chat``: ``messages`` (``role``/``content``) or ``conversations`` (ShareGPT ``from``/``value``, with
  human → user, gpt → assistant); a top-level ``system`` field becomes the system turn.
- ``preference``: ``prompt`` + ``chosen`` + ``rejected`` (DPO, ORPO, KTO), or only ``chosen`` + ``rejected`` with the
  prompt inside both (engine/data/preference_rows.py). Supervised methods train on the prompt and the chosen answer.

The ``columns`` mapping (``instruction=question, output=answer``, parsed by engine/refs.py `parse_columns`)
is applied before format detection, so that any table can be used without editing it. Rows come from files
(engine/data/files.py) or Hub datasets (engine/data/hub.py); both go through `normalize`. Individually bad rows are
dropped and listed with the reason; every column a format does not use is named in a note, with the mapping that would
use it where there is one (`unused_note`). Tokenization is engine/data/tokenize.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import DataError, Phrase, dropped_reasons
from ..refs import mapping_format
from .files import BadRow, display_name, read_rows
from .messages import as_text, lower_keys, norm_messages, with_system
from .preference_rows import label_column, norm_preference, norm_unpaired, split_note

Format = Literal["text", "instruction", "prompt_completion", "unpaired", "chat", "preference"]

# format -> alternative sets of columns that identify it, in order of preference when a file has several
FORMAT_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "preference": (("prompt", "chosen", "rejected"), ("chosen", "rejected")),
    "unpaired": (("prompt", "completion", "label"),),
    "chat": (("messages",), ("conversations",)),
    "instruction": (("instruction", "output"), ("instruction", "response")),
    "prompt_completion": (("prompt", "completion"),),
    "text": (("text",),),
}
# The columns each format reads (beside its FORMAT_KEYS); any other column is named in the data check's note
OPTIONAL_KEYS: dict[str, tuple[str, ...]] = {"instruction": ("input", "context", "system"), "chat": ("system",), "preference": ("system",),
                                             "unpaired": ("system",)}
# Common column names of public datasets, to suggest a mapping when detection finds nothing.
_GUESSES: dict[str, tuple[str, ...]] = {
    "instruction": ("question", "query", "instruction", "task", "pergunta", "problem", "prompt", "input"),
    "input": ("context", "input", "contexto"),
    "output": ("answer", "response", "output", "resposta", "solution", "target", "completion"),
    "text": ("body", "content", "document", "passage", "sentence", "article", "texto", "story"),
    "messages": ("conversation", "conversations", "dialog", "dialogue", "chat", "turns", "messages"),
}


class MappedColumnsMissing(DataError):
    """The column mapping names source columns the data does not have."""



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
        text = f"{len(self.records)} {self.format} rows from {display_name(self.source)}"
        return text + (f" ({len(self.dropped)} dropped)" if self.dropped else "")



def load_records(source: str, *, columns: dict[str, str] | None = None) -> RecordSet:
    """Read a built-in sample (``builtin:NAME``) or a local file and normalize its rows.

    columns: an optional mapping target -> source column (engine/refs.py `parse_columns`) applied
    before format detection. Hub datasets too: engine/data/build.py `load_source`.

    Raises `DataError` with an actionable message when the file as a whole cannot be used (missing,
    empty, unsupported extension, not UTF-8, binary, too big, invalid JSON on some line, no recognizable
    columns, or no usable row). Individually bad rows are dropped and listed in `RecordSet.dropped`.
    """
    raw, unit, name = read_rows(source)
    return normalize(raw, unit, source, name, columns)



# --------------------------------------------------------------------------------------------------
# Format detection and normalization
# --------------------------------------------------------------------------------------------------


def _detect_format(rows: Sequence[dict[str, Any]]) -> Format | None:
    """The format whose columns most sampled rows have; ties go to the more structured format."""
    sample = rows[:500]
    best: tuple[int, str] | None = None
    for fmt, alternatives in FORMAT_KEYS.items():  # dict order = preference order
        count = sum(any(all(k in row for k in keys) for keys in alternatives) for row in sample)
        if count and (best is None or count > best[0]):
            best = (count, fmt)
    return best[1] if best else None  # type: ignore[return-value]


def normalize(raw: list[tuple[int, Any]], unit: str, source: str, name: str, mapping: dict[str, str] | None = None) -> RecordSet:
    """The `RecordSet` of raw ``(position, row)`` pairs from a file or a Hub split, named `name` in messages.

    The column mapping, when given, decides the format; otherwise it is detected. Rows that cannot be used are
    dropped with the reason; `DataError` when no format is recognized or no row is left.
    """
    dropped: list[tuple[int, str]] = []
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, row in raw:
        if isinstance(row, BadRow):
            dropped.append((number, row.args[0]))  # the reason (a Phrase: English as text, any language when rendered)
        elif isinstance(row, str):  # a list of strings is a plain-text dataset
            rows.append((number, {"text": row}))
        elif isinstance(row, dict):
            rows.append((number, lower_keys(row)))
        else:
            dropped.append((number, Phrase("text.row.not_object", found=type(row).__name__)))
    counts = Counter(key for _, row in rows for key in row)
    columns = [key for key, _ in counts.most_common()]
    notes: list[str] = []
    if mapping:  # the mapping's targets decide the format
        rows, fmt = apply_columns(rows, mapping, columns, name)
    else:
        fmt = _detect_format([row for _, row in rows])
        if fmt is None:
            raise no_format_error(name, columns)
        note = ambiguity_note([row for _, row in rows], fmt)
        notes = [note] if note else []
    label = label_column([row for _, row in rows]) if fmt == "prompt_completion" else None
    if label:  # a good/bad mark under another name (thumbs, feedback...) is the label: never trained past unread
        rows = [(n, {**{k: v for k, v in row.items() if k != label}, "label": row[label]}) for n, row in rows]
        fmt, notes = "unpaired", [*notes, Phrase("text.note.label_column", column=label)]
    normalizer = _NORMALIZERS[fmt]
    records, kept_rows = [], []
    for number, row in rows:
        try:
            records.append(normalizer(row))
            kept_rows.append(number)
        except BadRow as why:
            dropped.append((number, why.args[0]))
    dropped.sort()
    if not records:
        reasons = dropped_reasons(dropped, unit)
        raise DataError(key="error.data.no_usable_rows", file=name, n=len(raw), format=fmt, reasons=reasons)
    extra = [unused_note([row for _, row in rows], fmt), split_note(records, kept_rows) if fmt == "preference" else None]
    return RecordSet(records, fmt, source, dropped, kept_rows, unit, columns, notes + [n for n in extra if n])


def used_columns(row: dict[str, Any], fmt: str) -> set[str]:
    """The columns of a (mapped) row that format `fmt` reads: its FORMAT_KEYS and OPTIONAL_KEYS (an instruction row
    reads 'input', or Dolly's 'context' when it has no 'input'; 'output', or 'response' when it has no 'output')."""
    used = {k for keys in FORMAT_KEYS[fmt] for k in keys} | set(OPTIONAL_KEYS.get(fmt, ()))
    if fmt == "instruction":
        used -= {"context"} if "input" in row else set()
        used -= {"response"} if "output" in row else set()
    if fmt == "chat":
        used -= {"conversations"} if "messages" in row else set()
    return used


def unused_note(rows: list[dict[str, Any]], fmt: str, also_used: tuple[str, ...] = ()) -> Phrase | None:
    """A note naming every column no row's format reads (after the mapping: the rows' keys are the mapped names), with
    a mapping that would use one where the format has a place for it (an instruction row's input or system turn; a
    pair's or chat's system turn). also_used: columns a run reads beside the format (a curriculum's difficulty column)."""
    sample = rows[:500]
    unused = sorted({k for row in sample for k in row if k not in used_columns(row, fmt) and k not in also_used})
    if not unused:
        return None
    shown = ", ".join(repr(c) for c in unused[:12]) + (f" (+{len(unused) - 12})" if len(unused) > 12 else "")
    systemish = next((c for c in unused if "system" in c or c in ("persona", "sistema")), None)
    if systemish and fmt in OPTIONAL_KEYS:
        return Phrase("text.note.unused_system", columns=shown, example=f"system={systemish}")
    texty = next((c for c in unused if any(isinstance(r.get(c), str) and r[c].strip() for r in sample)), None)
    if fmt == "instruction" and texty:
        return Phrase("text.note.unused_input", columns=shown, example=f"input={texty}")
    return Phrase("text.note.unused", columns=shown, format=fmt)


def _norm_text(row: dict[str, Any]) -> dict[str, Any]:
    return {"text": as_text(row, "text", required=True)}


def _norm_instruction(row: dict[str, Any]) -> dict[str, Any]:
    out_key = "output" if "output" in row or "response" not in row else "response"
    record = {
        "instruction": as_text(row, "instruction", required=True),
        "input": as_text(row, "input" if "input" in row else "context", required=False),  # Dolly names it context
        "output": as_text(row, out_key, required=True),
    }
    system = as_text(row, "system", required=False)
    if system.strip():
        record["system"] = system
    return record


def _norm_prompt_completion(row: dict[str, Any]) -> dict[str, Any]:
    record = {}
    for key, role in (("prompt", "user"), ("completion", "assistant")):
        value = row.get(key)
        if isinstance(value, list):  # conversational prompt/completion (TRL style)
            record[key] = norm_messages(value, need_assistant=role == "assistant", trim=False)
            if not record[key]:
                raise BadRow(Phrase("text.row.empty", key=key))
        else:
            record[key] = as_text(row, key, required=True)
    return record


def _norm_chat(row: dict[str, Any]) -> dict[str, Any]:
    key = "messages" if "messages" in row else "conversations"
    value = row.get(key)
    if isinstance(value, str):  # a CSV cell holding JSON
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise BadRow(Phrase("text.row.text_not_messages", key=key)) from None
    if not isinstance(value, list) or not value:
        raise BadRow(Phrase("text.row.no_messages", key=key))
    return {"messages": with_system(norm_messages(value, need_assistant=True, trim=True), row)}


_NORMALIZERS = {
    "text": _norm_text,
    "instruction": _norm_instruction,
    "prompt_completion": _norm_prompt_completion,
    "unpaired": norm_unpaired,
    "chat": _norm_chat,
    "preference": norm_preference,
}


def to_messages(record: dict[str, Any], fmt: Format) -> list[dict[str, str]]:
    """Chat messages of an instruction / prompt_completion / chat record.

    Instruction and input (or context) are joined with a blank line into the user turn; an optional `system` field
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
    if fmt == "preference":  # supervised training on a pair learns the chosen answer
        return [dict(m) for m in record["prompt"] + record["chosen"]]
    if fmt == "unpaired":  # a labelled completion as written (only KTO trains on it: engine/data/build.py refuses the others)
        return [dict(m) for m in record["prompt"] + record["completion"]]
    raise ValueError(f"to_messages needs a chat-like format, not {fmt!r}")


def record_texts(recordset: RecordSet) -> list[str]:
    """Plain texts of a record set (e.g. to train a tokenizer on it): the text of text rows, the joined
    message contents of chat-like rows."""
    if recordset.format == "text":
        return [r["text"] for r in recordset.records]
    return ["\n".join(m["content"] for m in to_messages(r, recordset.format)) for r in recordset.records]



# --------------------------------------------------------------------------------------------------
# Column mapping (applied by `normalize` before format detection)
# --------------------------------------------------------------------------------------------------


def apply_columns(
    rows: list[tuple[int, dict[str, Any]]], mapping: dict[str, str], found: list[str], name: str
) -> tuple[list[tuple[int, dict[str, Any]]], Format]:
    """Rename the mapped columns of (lower-cased) rows; returns the rows and the format the targets name.

    A mapped source column replaces a column of the target's name; unmapped columns are kept (so an
    'input' column still joins 'instruction=question, output=answer'). Raises `DataError` naming the
    source columns that no row has, with the columns found.
    """
    missing = [s for s in mapping.values() if s not in found]
    if missing:
        raise MappedColumnsMissing(key="error.data.mapped_missing_one" if len(missing) == 1 else "error.data.mapped_missing",
                                   file=name, missing=", ".join(map(repr, missing)), found=_listing(found))
    sources = set(mapping.values())
    out = []
    for number, row in rows:
        new = {k: v for k, v in row.items() if k not in sources}
        for target, source in mapping.items():
            if source in row:
                new[target] = row[source]
        out.append((number, new))
    sample = [row for _, row in out[:500]]
    fmt = mapping_format(mapping) or _detect_format(sample)
    if fmt is None:
        raise no_format_error(name, found)
    has = {k for row in sample for k in row}
    if fmt == "prompt_completion" and {"chosen", "rejected"} <= has:  # prompt=question beside chosen/rejected: a pair's prompt
        fmt = "preference"
    elif fmt == "prompt_completion" and "label" in has:  # a label is never left unused (KTO's labelled completions)
        fmt = "unpaired"
    if not any(all(k in row for k in keys) for row in sample for keys in FORMAT_KEYS[fmt]):
        need = " or ".join(" + ".join(keys) for keys in FORMAT_KEYS[fmt])
        raise DataError(key="error.data.mapping_incomplete", file=name, format=fmt, need=need,
                        have=_listing(sorted({k for row in sample for k in row})), example=suggest_mapping(found))
    return out, fmt


def no_format_error(name: str, columns: list[str]) -> DataError:
    """The error when no format is recognized: the columns found and a mapping to type, with their names."""
    return DataError(key="error.data.no_format" if columns else "error.data.no_format_none", file=name, found=_listing(columns),
                     example=suggest_mapping(columns))


def ambiguity_note(rows: list[dict[str, Any]], chosen: str) -> Phrase | None:
    """A note when the columns fit several formats (the most structured one was used)."""
    fits = [fmt for fmt, alts in FORMAT_KEYS.items() if any(all(k in r for k in keys) for r in rows[:500] for keys in alts)
            and not (fmt == "prompt_completion" and chosen == "unpaired")]  # a labelled completion is never read without its label
    if len(fits) < 2:
        return None
    other = next(f for f in fits if f != chosen)
    example = {"text": "text=text", "instruction": "instruction=instruction, output=output", "prompt_completion": "prompt=prompt, completion=completion",
               "chat": "messages=messages", "preference": "prompt=prompt, chosen=chosen, rejected=rejected",
               "unpaired": "prompt=prompt, completion=completion, label=label"}[other]
    return Phrase("text.note.ambiguous", formats=", ".join(fits), chosen=chosen, example=example)


def suggest_mapping(columns: list[str]) -> str:
    """A column mapping built from common column names (question/answer, body, conversation...), or a
    template using the first columns of the data."""

    def pick(target: str, taken: set[str]) -> str | None:
        return next((c for g in _GUESSES[target] for c in columns if c == g and c not in taken), None)

    instruction = pick("instruction", set())
    output = pick("output", {instruction} if instruction else set())
    if instruction and output:
        extra = pick("input", {instruction, output})
        return f"instruction={instruction}, " + (f"input={extra}, " if extra else "") + f"output={output}"
    for target in ("messages", "text"):
        found = pick(target, set())
        if found:
            return f"{target}={found}"
    if len(columns) >= 2:
        return f"instruction={columns[0]}, output={columns[1]}"
    return f"text={columns[0]}" if columns else "text=COLUMN"


def _listing(columns: list[str]) -> str:
    shown = ", ".join(repr(c) for c in columns[:20])
    return shown + (f" (+{len(columns) - 20})" if len(columns) > 20 else "")  # no words: shown in either language

