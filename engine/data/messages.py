"""The cells of a dataset row as the formats read them: text cells, lists of chat messages (OpenAI's role/content,
ShareGPT's from/value), and the column names lower-cased.

Below engine/data/formats.py (the formats and their detection) and engine/data/preference_rows.py (preference pairs
and labelled completions), which both normalise rows with these. A cell that cannot be used raises `BadRow` with a
keyed reason (engine/errors.py `Phrase`), shown in the visitor's language.
"""

from __future__ import annotations

from typing import Any

from ..errors import Phrase
from .files import BadRow

ROLE_ALIASES: dict[str, str] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "bot": "assistant",
    "model": "assistant",
}


def lower_keys(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with its keys stripped and lower-cased (the first of two keys that differ only in case wins)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        out.setdefault(str(key).strip().lower(), value)
    return out


def as_text(row: dict[str, Any], key: str, *, required: bool) -> str:
    """The text of `row[key]` (numbers as text, None/NaN as ""); `BadRow` for a non-text value, or an empty or missing
    one when `required`."""
    value = row.get(key)
    if value is None or (isinstance(value, float) and value != value):  # None or NaN (pandas/parquet)
        value = ""
    elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadRow(Phrase("text.row.not_text", key=key, found=type(value).__name__))
    value = str(value)
    if required and not value.strip():
        raise BadRow(Phrase("text.row.empty" if key in row else "text.row.missing", key=key))
    return value


def norm_messages(messages: list[Any], *, need_assistant: bool, trim: bool) -> list[dict[str, str]]:
    """A list of messages as ``[{"role", "content"}]`` with the roles named system/user/assistant. trim: drop trailing
    user turns and a leading assistant greeting; need_assistant: `BadRow` when no assistant turn is left."""
    out: list[dict[str, str]] = []
    for turn, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise BadRow(Phrase("text.row.message_not_object", turn=turn))
        message = lower_keys(message)
        role_raw = message.get("role", message.get("from"))
        role = ROLE_ALIASES.get(str(role_raw).strip().lower()) if role_raw is not None else None
        if role is None:
            raise BadRow(Phrase("text.row.unknown_role", turn=turn, role=str(role_raw)))
        content = flatten_content(message.get("content", message.get("value")))
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


def flatten_content(content: Any) -> str | None:
    """Message content as text; a list of parts ([{"type": "text", "text": ...}]) is joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        texts += [p for p in content if isinstance(p, str)]
        return "".join(texts) if texts else None
    return None


def with_system(messages: list[dict[str, str]], row: dict[str, Any]) -> list[dict[str, str]]:
    """`messages` with the row's top-level ``system`` field as their first turn (ShareGPT and Orca-style rows keep the
    system prompt beside the conversation), unless they already start with a system turn or the field is empty."""
    system = as_text(row, "system", required=False) if "system" in row else ""
    if not system.strip() or (messages and messages[0]["role"] == "system"):
        return messages
    return [{"role": "system", "content": system}, *messages]
