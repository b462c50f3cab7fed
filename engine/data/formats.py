"""Dataset formats: detecting the format of raw rows, normalizing them into a `RecordSet`, the column mapping, and
turning records into chat messages.

Formats (detected from the keys/columns of the rows):

- ``text``: ``{"text": ...}`` — plain language modelling; a .txt file gives one row per paragraph.
- ``instruction``: ``instruction`` (+ optional ``input``, ``system``) + ``output`` (or ``response``).
- ``prompt_completion``: ``prompt`` + ``completion`` (strings, or lists of messages as in TRL).
- ``chat``: ``messages`` (``role``/``content``) or ``conversations`` (ShareGPT ``from``/``value``, with
  human → user, gpt → assistant).
- ``preference``: ``prompt`` + ``chosen`` + ``rejected`` (DPO, ORPO): texts, or lists of messages as in TRL; or only
  ``chosen`` + ``rejected`` as whole conversations that share their first turns (the prompt is what they share).
  Supervised methods train on the prompt and the chosen answer.

The ``columns`` mapping (``instruction=question, output=answer``, parsed by engine/refs.py `parse_columns`)
is applied before format detection, so that any table can be used without editing it. Rows come from files
(engine/data/files.py) or Hub datasets (engine/data/hub.py); both go through `normalize`. Individually bad rows are
dropped and listed with the reason; tokenization is engine/data/tokenize.py.
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

Format = Literal["text", "instruction", "prompt_completion", "chat", "preference"]

# format -> alternative sets of columns that identify it, in order of preference when a file has several
FORMAT_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "preference": (("prompt", "chosen", "rejected"), ("chosen", "rejected")),
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
            rows.append((number, _lower_keys(row)))
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
    return RecordSet(records, fmt, source, dropped, kept_rows, unit, columns, notes)


def _as_text(row: dict[str, Any], key: str, *, required: bool) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and value != value):  # None or NaN (pandas/parquet)
        value = ""
    elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadRow(Phrase("text.row.not_text", key=key, found=type(value).__name__))
    value = str(value)
    if required and not value.strip():
        raise BadRow(Phrase("text.row.empty" if key in row else "text.row.missing", key=key))
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
                raise BadRow(Phrase("text.row.empty", key=key))
        else:
            record[key] = _as_text(row, key, required=True)
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
    return {"messages": _norm_messages(value, need_assistant=True, trim=True)}


def _norm_messages(messages: list[Any], *, need_assistant: bool, trim: bool) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for turn, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise BadRow(Phrase("text.row.message_not_object", turn=turn))
        message = _lower_keys(message)
        role_raw = message.get("role", message.get("from"))
        role = ROLE_ALIASES.get(str(role_raw).strip().lower()) if role_raw is not None else None
        if role is None:
            raise BadRow(Phrase("text.row.unknown_role", turn=turn, role=str(role_raw)))
        content = _flatten_content(message.get("content", message.get("value")))
        if content is None:
            raise BadRow(Phrase("text.row.no_content", turn=turn))
        if not content.strip():
            if role == "system":
                continue
            raise BadRow(Phrase("text.row.empty_message", turn=turn, role=role))
        out.append({"role": role, "content": content})
    if trim:
        # trailing user turns have nothing to learn from; a leading assistant turn (a canned greeting)
        # has no prompt to answer, and many templates reject a conversation that starts with one
        while out and out[-1]["role"] != "assistant":
            out.pop()
        first_user = next((i for i, m in enumerate(out) if m["role"] == "user"), len(out))
        out = [m for i, m in enumerate(out) if i >= first_user or m["role"] == "system"]
    if need_assistant and not any(m["role"] == "assistant" for m in out):
        raise BadRow(Phrase("text.row.no_assistant"))
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


def norm_preference(row: dict[str, Any]) -> dict[str, Any]:
    """A preference pair as ``{"prompt": [messages], "chosen": [assistant messages], "rejected": [...]}``.

    Texts become one user / one assistant message; TRL's conversational pairs keep their messages. Without a
    ``prompt``, ``chosen`` and ``rejected`` are whole conversations and their shared first messages are the prompt.
    Raises `BadRow` naming what is wrong (an empty answer, identical answers, no prompt)."""
    sides: dict[str, list[dict[str, str]]] = {}
    for key in ("chosen", "rejected"):
        value = row.get(key)
        if isinstance(value, str) and value.strip().startswith("[") and "prompt" not in row:  # a CSV cell holding JSON
            try:
                value = json.loads(value)
            except (json.JSONDecodeError, RecursionError):
                pass
        if isinstance(value, list):
            sides[key] = _norm_messages(value, need_assistant=False, trim=False)
        else:
            sides[key] = [{"role": "assistant", "content": _as_text(row, key, required=True)}]
    if "prompt" in row:
        prompt_value = row.get("prompt")
        if isinstance(prompt_value, list):
            prompt = _norm_messages(prompt_value, need_assistant=False, trim=False)
        else:
            prompt = [{"role": "user", "content": _as_text(row, "prompt", required=True)}]
    else:  # implicit prompt: the turns both conversations share
        shared = 0
        while shared < min(len(sides["chosen"]), len(sides["rejected"])) and sides["chosen"][shared] == sides["rejected"][shared]:
            shared += 1
        prompt = sides["chosen"][:shared]
        sides = {k: v[shared:] for k, v in sides.items()}
    if not any(m["role"] == "user" for m in prompt):
        raise BadRow("no prompt: a 'prompt' column, or 'chosen' and 'rejected' conversations that start with the same user turn")
    for key, messages in sides.items():
        if not messages or not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
            raise BadRow(f"empty '{key}' answer")
    if sides["chosen"] == sides["rejected"]:
        raise BadRow("'chosen' and 'rejected' are the same answer: nothing to prefer")
    return {"prompt": prompt, **sides}


_NORMALIZERS = {
    "text": _norm_text,
    "instruction": _norm_instruction,
    "prompt_completion": _norm_prompt_completion,
    "chat": _norm_chat,
    "preference": norm_preference,
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
    if fmt == "preference":  # supervised training on a pair learns the chosen answer
        return [dict(m) for m in record["prompt"] + record["chosen"]]
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
    fmt = mapping_format(mapping)
    sample = [row for _, row in out[:500]]
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
    fits = [fmt for fmt, alts in FORMAT_KEYS.items() if any(all(k in r for k in keys) for r in rows[:500] for keys in alts)]
    if len(fits) < 2:
        return None
    other = next(f for f in fits if f != chosen)
    example = {"text": "text=text", "instruction": "instruction=instruction, output=output", "prompt_completion": "prompt=prompt, completion=completion",
               "chat": "messages=messages", "preference": "prompt=prompt, chosen=chosen, rejected=rejected"}[other]
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

