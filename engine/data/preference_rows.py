"""The rows of the preference methods, normalised: pairs of a better and a worse answer (DPO, ORPO; KTO unpairs them)
and labelled completions (KTO: one answer marked good or bad, the shape of a chat app's thumbs-up/down export).

Pairs come as people bring them:

- ``prompt`` + ``chosen`` + ``rejected``: texts, or TRL's lists of messages. A chosen/rejected conversation that
  repeats the prompt first (UltraFeedback's ``chosen`` holds the user turn too) loses the repeat.
- only ``chosen`` + ``rejected``, the prompt inside both (an implicit prompt, as trl's `extract_prompt` reads it):
  conversations (lists of messages, or Anthropic-HH-style ``Human: … Assistant: …`` transcripts, split into turns
  here) give the turns they share as the prompt; other texts give the characters they share (trl's own rule). The
  record keeps how it was split under ``split``, and `split_note` says where, for the data check.
- a prompt in another column (Orca-style ``question``): every row says which mapping to type (``prompt=question``).
- a top-level ``system`` field becomes the system turn.

Labelled completions: ``prompt`` + ``completion`` + ``label`` (true/false, 1/0, good/bad, thumbs up/down emoji, yes/no …).
Reasons a row is dropped are keyed (`Phrase`), shown in the visitor's language.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import Phrase
from .files import BadRow
from .messages import ROLE_ALIASES, as_text, norm_messages, with_system

# Columns that hold a pair's prompt in public datasets (Orca pairs: question); offered as `prompt=COLUMN`.
PROMPT_COLUMNS = ("question", "instruction", "input", "query", "prompt_text", "user", "pergunta", "problem")
# What a label cell may say, lower-cased (a feedback export's words, trl's booleans, spreadsheet 1/0)
GOOD_LABELS = {"true", "1", "1.0", "yes", "y", "good", "\U0001F44D", "+1", "up", "thumbs_up", "thumbsup", "thumbs up", "positive", "pos",
               "desirable", "chosen", "accepted", "like", "liked", "sim", "bom", "boa", "positivo"}
BAD_LABELS = {"false", "0", "0.0", "-1", "no", "n", "bad", "\U0001F44E", "down", "thumbs_down", "thumbsdown", "thumbs down", "negative", "neg",
              "undesirable", "rejected", "dislike", "disliked", "não", "nao", "ruim", "negativo"}
# Columns a feedback export names its good/bad mark with: read as the label when every value is one (`label_column`)
LABEL_COLUMNS = ("label", "thumbs", "thumb", "thumbs_up", "feedback", "rating", "is_good", "good", "liked", "desirable", "kto_label")
# "Human: …" / "Assistant: …" at the start of a line: the turns of an Anthropic-HH-style transcript
_TURN = re.compile(r"(?:^|\n)[ \t]*(human|user|assistant|system)[ \t]*:[ \t]?", re.IGNORECASE)


def parse_label(row: dict[str, Any], key: str = "label") -> bool:
    """The label cell as good (True) or bad (False); `BadRow` naming the value when it is neither."""
    value = row.get(key)
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1, -1):
        return value == 1
    text = str(value).strip().lower() if value is not None else ""
    if text in GOOD_LABELS:
        return True
    if text in BAD_LABELS:
        return False
    raise BadRow(Phrase("text.row.bad_label", key=key, value=str(value)[:40]))


def label_column(rows: list[dict[str, Any]]) -> str | None:
    """The column of prompt/completion rows that marks each answer good or bad (every value a label: true/false,
    thumbs emoji, up/down ...), by the names feedback exports use; None when there is none."""
    for name in LABEL_COLUMNS:
        values = [row[name] for row in rows[:500] if name in row]
        if values and len(values) == len(rows[:500]):
            try:
                for value in values:
                    parse_label({"label": value})
            except BadRow:
                continue
            return name
    return None


def transcript_turns(text: str) -> list[dict[str, str]] | None:
    """The turns of a ``Human: … Assistant: …`` transcript, or None when the text is not one (it must start with a
    turn marker and hold a user and an assistant turn)."""
    marks = list(_TURN.finditer(text))
    if not marks or text[: marks[0].start()].strip():
        return None
    turns = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        turns.append({"role": ROLE_ALIASES[mark.group(1).lower()], "content": text[mark.end():end].strip()})
    roles = {t["role"] for t in turns}
    return turns if {"user", "assistant"} <= roles else None


def _side(row: dict[str, Any], key: str) -> list[dict[str, str]] | str:
    value = row.get(key)
    if isinstance(value, str) and value.strip().startswith("["):  # a CSV cell holding JSON
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            pass
    if isinstance(value, list):
        return norm_messages(value, need_assistant=False, trim=False)
    return as_text(row, key, required=True)


def _no_prompt(row: dict[str, Any]) -> BadRow:
    column = next((c for c in PROMPT_COLUMNS if c in row and str(row.get(c) or "").strip()), None)
    if column:
        return BadRow(Phrase("text.row.pair_prompt_column", column=column, mapping=f"prompt={column}"))
    return BadRow(Phrase("text.row.pair_no_prompt"))


def _shared_text(a: str, b: str) -> int:
    """Where two texts part, as trl's `extract_prompt` splits them (a space before the first different character stays
    with the answers)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    if 0 < n < min(len(a), len(b)) and a[n - 1] == " ":
        n -= 1
    return n


def norm_preference(row: dict[str, Any]) -> dict[str, Any]:
    """A preference pair as ``{"prompt": [messages], "chosen": [answer messages], "rejected": [...]}`` (plus ``split``:
    "turns" or "text" when the prompt was found inside the answers). `BadRow` naming what is wrong."""
    sides = {key: _side(row, key) for key in ("chosen", "rejected")}
    split = None
    if str(row.get("prompt") or "").strip() or isinstance(row.get("prompt"), list):
        value = row["prompt"]
        prompt = norm_messages(value, need_assistant=False, trim=False) if isinstance(value, list) else \
            [{"role": "user", "content": as_text(row, "prompt", required=True)}]
        out = {}
        for key, side in sides.items():
            messages = side if isinstance(side, list) else [{"role": "assistant", "content": side}]
            if messages[: len(prompt)] == prompt:  # UltraFeedback-style: the conversation repeats the prompt first
                messages = messages[len(prompt):]
            out[key] = messages
        sides = out
    else:  # an implicit prompt: the opening both answers share
        if all(isinstance(s, str) for s in sides.values()):
            turns = {k: transcript_turns(s) for k, s in sides.items()}
            if all(turns.values()):
                sides = turns
        if all(isinstance(s, list) for s in sides.values()):
            shared = 0
            while shared < min(len(sides["chosen"]), len(sides["rejected"])) and sides["chosen"][shared] == sides["rejected"][shared]:
                shared += 1
            prompt, split = sides["chosen"][:shared], "turns"
            sides = {k: v[shared:] for k, v in sides.items()}
        elif all(isinstance(s, str) for s in sides.values()) and not any(c in row for c in PROMPT_COLUMNS):
            n = _shared_text(sides["chosen"], sides["rejected"])
            if not sides["chosen"][:n].strip():
                raise _no_prompt(row)
            prompt, split = [{"role": "user", "content": sides["chosen"][:n]}], "text"
            sides = {k: [{"role": "assistant", "content": v[n:]}] for k, v in sides.items()}
        else:
            raise _no_prompt(row)
    if not any(m["role"] == "user" for m in prompt):
        raise _no_prompt(row)
    for key, messages in sides.items():
        if not messages or not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
            raise BadRow(Phrase("text.row.empty_answer", key=key))
    if sides["chosen"] == sides["rejected"]:
        raise BadRow(Phrase("text.row.same_answers"))
    record = {"prompt": with_system(prompt, row), **sides}
    return {**record, "split": split} if split else record


def norm_unpaired(row: dict[str, Any]) -> dict[str, Any]:
    """A labelled completion as ``{"prompt": [messages], "completion": [answer messages], "label": bool}``."""
    label = parse_label(row)
    record: dict[str, Any] = {}
    for key, role in (("prompt", "user"), ("completion", "assistant")):
        value = row.get(key)
        if isinstance(value, list):  # conversational (TRL's unpaired preference)
            record[key] = norm_messages(value, need_assistant=role == "assistant", trim=False)
            if not record[key]:
                raise BadRow(Phrase("text.row.empty", key=key))
        else:
            record[key] = [{"role": role, "content": as_text(row, key, required=True)}]
    return {"prompt": with_system(record["prompt"], row), "completion": record["completion"], "label": label}


def split_note(records: list[dict[str, Any]], rows: list[int]) -> Phrase | None:
    """Where the first implicitly split pair parts into prompt and answers (None when every pair had a prompt)."""
    first = next(((n, r) for n, r in zip(rows, records, strict=True) if r.get("split")), None)
    if first is None:
        return None
    number, record = first
    count = sum(1 for r in records if r.get("split"))

    def clip(text: str, tail: bool) -> str:
        text = " ".join(text.split())
        return ("…" + text[-40:] if len(text) > 40 else text) if tail else (text[:30] + "…" if len(text) > 30 else text)

    if record["split"] == "turns":
        n_prompt = len(record["prompt"]) - (1 if record["prompt"][0]["role"] == "system" else 0)
        return Phrase("text.note.split_turns", n=count, row=number, turns=n_prompt, end=clip(record["prompt"][-1]["content"], True),
                      chosen=clip(record["chosen"][0]["content"], False), rejected=clip(record["rejected"][0]["content"], False))
    return Phrase("text.note.split_text", n=count, row=number, end=clip(record["prompt"][-1]["content"], True),
                  chosen=clip(record["chosen"][0]["content"], False), rejected=clip(record["rejected"][0]["content"], False))
