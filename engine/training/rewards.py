"""The built-in reward functions of GRPO, chosen by name (`reward: dates, format:0.5`; engine/config.py
`parse_rewards`). Never code from the user: a shared app runs them on its own machine.

- `dates`: 1 when the answer's first line is exactly the expected ISO date, by the date task's own scorer
  (engine/inference/tasks.py `score_outputs`: the same comparison as the accuracy the run reports), else 0.
- `date_parts`: a third for each of the year, the month and the day that sits in its place of the expected YYYY-MM-DD
  (the first line split at '-'): partial credit. A model that gets a date right a fifth of the time rarely has a
  group of answers where one is exactly right, and a group that scores all 0 teaches nothing; most answers get
  some parts right, so this reward tells the answers of a group apart far more often (docs/preference.md measures it).
- `format`: 1 when the first line is a well-formed calendar date written YYYY-MM-DD, else 0: partial credit that
  is not sparse (a model that writes dates in the wrong order still learns the format).
- `length`: 0 for an answer that is one short line, down to -1 as text runs on past it (LENGTH_FREE characters on the
  first line are free, every line after the first costs): against answers that never stop.

Each function has trl's reward signature, `f(prompts, completions, **columns) -> list[float]` (the dataset's `answer`
column arrives as a keyword), and its `__name__` is the reward's name, which trl logs as `rewards/<name>/mean`.
`RewardRecorder` keeps the latest answers with their weighted rewards so that the run's log can show a few of them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..inference.tasks import normalize_answer, score_outputs
from ..objectives import parse_rewards

LENGTH_FREE = 24  # characters of the first line that cost nothing: an ISO date is 10, a short sentence fits
LENGTH_SCALE = 64  # characters past the free ones that cost the whole penalty (-1)
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}$")

Reward = Callable[..., list[float]]


def _text(completion: Any) -> str:
    """A completion as text: trl passes strings for text prompts, lists of messages for conversational ones."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def dates_reward(completion: str, answer: str) -> float:
    """1.0 when the date task's scorer counts `completion` right for the expected `answer`, else 0.0."""
    return float(score_outputs([{"instruction": "", "input": "", "output": answer}], [completion]).correct)


def date_parts_reward(completion: str, answer: str) -> float:
    """The share of year, month and day of the expected `answer` found in their place in the first line (0, 1/3, 2/3, 1)."""
    got = normalize_answer(completion).split("-")
    want = str(answer).strip().split("-")
    if len(want) != 3:
        return 0.0
    return sum(1 for i in range(3) if i < len(got) and got[i] == want[i]) / 3


def format_reward(completion: str) -> float:
    """1.0 when the first line (as the scorer reads it) is a real date written YYYY-MM-DD, else 0.0."""
    line = normalize_answer(completion)
    if not _ISO.match(line):
        return 0.0
    try:
        dt.date.fromisoformat(line)
    except ValueError:
        return 0.0
    return 1.0


def length_reward(completion: str) -> float:
    """0.0 for one line of at most LENGTH_FREE characters, falling linearly to -1.0 over LENGTH_SCALE more characters
    (the first line's excess plus everything after it)."""
    text = completion.strip()
    first, _, rest = text.partition("\n")
    extra = max(0, len(first) - LENGTH_FREE) + len(rest)
    return -min(1.0, extra / LENGTH_SCALE)


def _batch(name: str, one: Callable[..., float], needs_answer: bool) -> Reward:
    def reward(prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str] | None = None, **_: Any) -> list[float]:
        texts = [_text(c) for c in completions]
        if needs_answer:
            if answer is None:
                raise ValueError(f"the '{name}' reward needs the dataset's answer column")
            return [one(t, a) for t, a in zip(texts, answer, strict=True)]
        return [one(t) for t in texts]

    reward.__name__ = name  # trl logs rewards/<__name__>/mean
    return reward


BUILTIN_REWARDS: dict[str, Reward] = {
    "dates": _batch("dates", dates_reward, needs_answer=True),
    "date_parts": _batch("date_parts", date_parts_reward, needs_answer=True),
    "format": _batch("format", format_reward, needs_answer=False),
    "length": _batch("length", length_reward, needs_answer=False),
}


class RewardRecorder:
    """The reward functions of a `reward:` spec, wrapped to remember the latest group of answers and their weighted
    rewards (what the run's log shows as samples). trl calls the functions once per generation batch, in order."""

    def __init__(self, spec: str) -> None:
        self.spec = parse_rewards(spec)
        self.latest: list[dict[str, Any]] = []
        self._parts: dict[str, list[float]] = {}
        self.functions: list[Reward] = [self._wrap(name) for name, _ in self.spec]
        self.weights: list[float] = [w for _, w in self.spec]

    def _wrap(self, name: str) -> Reward:
        inner = BUILTIN_REWARDS[name]

        def reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
            values = inner(prompts, completions, **columns)
            self._parts[name] = values
            if name == self.spec[-1][0]:  # the last function of the batch: every part is known
                self._remember(prompts, completions, columns.get("answer"))
            return values

        reward.__name__ = name
        return reward

    def _remember(self, prompts: Sequence[Any], completions: Sequence[Any], answers: Sequence[str] | None) -> None:
        total = [sum(w * self._parts[n][i] for n, w in self.spec) for i in range(len(completions))]
        self.latest = [{"prompt": _text(p), "completion": _text(c), "answer": None if answers is None else answers[i], "reward": round(r, 4)}
                       for i, (p, c, r) in enumerate(zip(prompts, completions, total, strict=True))]

    def samples(self, n: int = 3) -> list[dict[str, Any]]:
        """A few of the latest answers with their rewards: the best, the worst and one between, when they differ."""
        if not self.latest:
            return []
        ranked = sorted(self.latest, key=lambda s: s["reward"], reverse=True)
        picks = [ranked[0], ranked[len(ranked) // 2], ranked[-1]][:n]
        return [dict(p) for p in picks]
