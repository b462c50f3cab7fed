"""The built-in preference pairs (`builtin:preferences`, samples/preferences.jsonl): prompt, chosen, rejected, in
Portuguese and English, built from the other built-in samples so that a DPO or ORPO run has something to prefer; and
the built-in labelled answers derived from them (`builtin:feedback`, samples/feedback.jsonl): prompt, completion,
label, one answer per prompt marked good (true) or bad (false), the shape of a chat app's thumbs-up/down export, for KTO.

Each rejected answer is a plausible mistake, not noise: for the date task (samples/dates.jsonl) the day and month
swapped, the date left in its input format, or the separators wrong; for the instruction samples
(samples/instructions.jsonl) the answer cut off half-way, or the answer to another question of the same language.
Deterministic (fixed seeds): `python -m engine.data.preference_sample` rewrites both files, and a test checks that the
shipped files equal the generator's output.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from .files import SAMPLES_DIR

FILE = "preferences.jsonl"
FEEDBACK_FILE = "feedback.jsonl"
N_DATES = 300  # of the 600 training dates (never the test split's): as many pairs as the instruction samples and more
SEED = 27


def _date_mistake(answer: str, kind: int) -> str:
    """A wrong answer for the ISO date `answer` (YYYY-MM-DD): kind 0 swaps day and month, 1 keeps the day-first
    input order, 2 uses slashes; when the swap gives the same date (day == month) the input order is used instead."""
    year, month, day = answer.split("-")
    if kind == 0 and day != month:
        return f"{year}-{day}-{month}"
    if kind == 2:
        return f"{year}/{month}/{day}"
    return f"{day}/{month}/{year}"


def _cut(answer: str) -> str:
    """The first half of an answer's words: an answer that stops before it says what was asked."""
    words = answer.split()
    return " ".join(words[: max(1, len(words) // 2)])


def _is_portuguese(text: str) -> bool:
    return any(ch in text for ch in "ãõçéêáíóúâ") or any(w in text.lower().split() for w in ("o", "que", "é", "um", "uma", "de", "para"))


def _read(name: str) -> list[dict[str, Any]]:
    with (SAMPLES_DIR / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _prompt(row: dict[str, Any]) -> str:
    return row["instruction"] + (f"\n\n{row['input']}" if str(row.get("input") or "").strip() else "")


def preference_pairs() -> list[dict[str, str]]:
    """The pairs of samples/preferences.jsonl: the first N_DATES dates, then every instruction sample, interleaved so
    that any slice mixes both."""
    rng = random.Random(SEED)
    dates = [{"prompt": _prompt(r), "chosen": r["output"], "rejected": _date_mistake(r["output"], rng.randrange(3))}
             for r in _read("dates.jsonl")[:N_DATES]]
    rows = _read("instructions.jsonl")
    instructions = []
    for i, row in enumerate(rows):
        if i % 2 == 0 and len(row["output"].split()) >= 6:
            rejected = _cut(row["output"])
        else:  # the answer of the next sample in the same language: a confident answer to another question
            lang = _is_portuguese(row["instruction"])
            other = next(r for r in rows[i + 1:] + rows[:i] if _is_portuguese(r["instruction"]) == lang and r["output"] != row["output"])
            rejected = other["output"]
        instructions.append({"prompt": _prompt(row), "chosen": row["output"], "rejected": rejected})
    out: list[dict[str, str]] = []
    for i in range(max(len(dates), len(instructions))):
        out += ([dates[i]] if i < len(dates) else []) + ([instructions[i]] if i < len(instructions) else [])
    return out


def feedback_rows() -> list[dict[str, Any]]:
    """The rows of samples/feedback.jsonl: of each pair, either its chosen answer labelled true or its rejected one
    labelled false (a fair coin with a fixed seed), so each prompt has one answer, as in a feedback export; in the
    pairs' order (dates and instructions alternate)."""
    rng = random.Random(SEED + 1)
    out = []
    for pair in preference_pairs():
        good = rng.random() < 0.5
        out.append({"prompt": pair["prompt"], "completion": pair["chosen" if good else "rejected"], "label": good})
    return out


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in rows), encoding="utf-8")
    tmp.replace(path)
    return path


def write_preference_file(directory: Path = SAMPLES_DIR) -> Path:
    """(Re)write samples/preferences.jsonl atomically; returns its path."""
    return _write(Path(directory) / FILE, preference_pairs())


def write_feedback_file(directory: Path = SAMPLES_DIR) -> Path:
    """(Re)write samples/feedback.jsonl atomically; returns its path."""
    return _write(Path(directory) / FEEDBACK_FILE, feedback_rows())


if __name__ == "__main__":
    print(write_preference_file())
    print(write_feedback_file())
