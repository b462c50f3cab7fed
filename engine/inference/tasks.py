"""The built-in scored task: converting dates from DD/MM/YYYY to ISO 8601 (YYYY-MM-DD).

Why this task: a small or untrained model cannot do it (it has to copy eight digits and reorder them),
a few minutes of (Q)LoRA fine-tuning teaches it, and the answer is exact, so accuracy can be measured
automatically before and after training. The input is always day-first (DD/MM/YYYY, zero-padded) and the
English phrasings say so, so every prompt has exactly one right answer.

- `date_items("train" | "test", n)`: deterministic items from disjoint pools of dates (fixed seeds).
- `score_outputs(items, outputs)`: exact-match accuracy on the first line of each output.
- `evaluate_task(model, tokenizer, items)`: greedy, batched generation with the chat template, scored.
- `python -m engine.inference.tasks` rewrites engine/data/samples/dates.jsonl and dates_test.jsonl (a test checks that
  the files equal the generator's output).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import i18n
from ..data.files import SAMPLES_DIR
from ..data.formats import to_messages

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Split = Literal["train", "test"]

TRAIN_SIZE = 600
TEST_SIZE = 100
# The first TEST_POOL dates of the shuffled calendar are reserved for the test split, the rest for
# training, so the two splits never share a date whatever `n` is asked for.
TEST_POOL = 2_000
FIRST_DAY = dt.date(1900, 1, 1)
LAST_DAY = dt.date(2099, 12, 31)
POOL_SEED = 20_241_103
SPLIT_SEEDS: dict[str, int] = {"train": 1_001, "test": 2_002}
FILES: dict[str, str] = {"train": "dates.jsonl", "test": "dates_test.jsonl"}
N_EXAMPLES = 5  # (prompt, expected, got) triples kept in a TaskScore for display

# {d} is the date as DD/MM/YYYY. English templates always name the day-first order.
TEMPLATES_PT: tuple[str, ...] = (
    "Converta a data {d} para o formato ISO (AAAA-MM-DD).",
    "Reescreva a data {d} no formato AAAA-MM-DD.",
    "Qual é a data {d} no padrão ISO 8601 (AAAA-MM-DD)?",
    "Data: {d} (DD/MM/AAAA). Escreva-a como AAAA-MM-DD.",
    "Transforme {d} (dia/mês/ano) em AAAA-MM-DD.",
)
TEMPLATES_EN: tuple[str, ...] = (
    "Convert the date {d} (DD/MM/YYYY) to ISO format (YYYY-MM-DD).",
    "Rewrite {d} (day/month/year) as YYYY-MM-DD.",
    "What is {d} (DD/MM/YYYY) in ISO 8601 format (YYYY-MM-DD)?",
    "Date: {d} (DD/MM/YYYY). Give it as YYYY-MM-DD.",
    "Express the day-first date {d} in YYYY-MM-DD format.",
)
TEMPLATES: tuple[str, ...] = TEMPLATES_PT + TEMPLATES_EN


@dataclass
class TaskScore:
    """Result of scoring a task: accuracy in [0, 1] and a few examples to show."""

    accuracy: float
    n: int
    correct: int
    examples: list[tuple[str, str, str]] = field(default_factory=list)  # (prompt, expected, got)
    misses: list[tuple[str, str, str]] = field(default_factory=list)  # the first wrong answers, for the UI's right/wrong examples

    def summary(self, lang: str = "en") -> str:
        """One line for logs and the UI, in `lang`, e.g. 'accuracy 42.0% (42/100)'."""
        return i18n.t("playground.eval.acc_summary", lang, pct=i18n.fmt_number(100 * self.accuracy, lang, 1), correct=self.correct, n=self.n)


def _date_pool() -> list[dt.date]:
    days = (LAST_DAY - FIRST_DAY).days + 1
    pool = [FIRST_DAY + dt.timedelta(days=i) for i in range(days)]
    random.Random(POOL_SEED).shuffle(pool)
    return pool


def date_items(split: Split, n: int | None = None) -> list[dict[str, str]]:
    """Deterministic items of the date task, as instruction records (`instruction`, `input`, `output`).

    `n` defaults to 600 for "train" and 100 for "test"; the first `n` items are the same for every `n`
    (items are drawn in order), and train and test never share a date.
    """
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    pool = _date_pool()
    dates = pool[:TEST_POOL] if split == "test" else pool[TEST_POOL:]
    n = (TEST_SIZE if split == "test" else TRAIN_SIZE) if n is None else n
    if not 0 <= n <= len(dates):
        raise ValueError(f"n must be between 0 and {len(dates)} for the {split} split, not {n}")
    rng = random.Random(SPLIT_SEEDS[split])
    items = []
    for day in dates[:n]:
        template = TEMPLATES[rng.randrange(len(TEMPLATES))]
        items.append(
            {
                "instruction": template.format(d=day.strftime("%d/%m/%Y")),
                "input": "",
                "output": day.isoformat(),
            }
        )
    return items


def write_date_files(directory: Path = SAMPLES_DIR) -> list[Path]:
    """(Re)write the built-in train and test files of the date task; returns their paths."""
    paths = []
    for split, name in FILES.items():
        path = Path(directory) / name
        lines = [json.dumps(item, ensure_ascii=False) + "\n" for item in date_items(split)]  # type: ignore[arg-type]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(lines), encoding="utf-8")
        tmp.replace(path)  # atomic: never leave a half-written sample file
        paths.append(path)
    return paths


def normalize_answer(text: str) -> str:
    """The part of a model output that is compared: first non-empty line, no surrounding space,
    quotes or trailing punctuation (a model that answers '2024-11-03.' is right)."""
    stripped = text.strip()
    line = stripped.splitlines()[0] if stripped else ""
    return line.strip().rstrip(".,;:!?").strip().strip("\"'`").strip()


def _prompt_text(item: dict[str, Any]) -> str:
    return to_messages(item, "instruction")[-2]["content"]


def score_outputs(items: Sequence[dict[str, Any]], outputs: Sequence[str]) -> TaskScore:
    """Exact-match accuracy of `outputs` against each item's `output` (after `normalize_answer`)."""
    if len(items) != len(outputs):
        raise ValueError(f"got {len(outputs)} outputs for {len(items)} items")
    correct = 0
    examples, misses = [], []
    for item, got in zip(items, outputs, strict=True):
        expected = str(item["output"]).strip()
        right = normalize_answer(got) == expected
        correct += right
        if len(examples) < N_EXAMPLES:
            examples.append((_prompt_text(item), expected, got))
        if not right and len(misses) < N_EXAMPLES:
            misses.append((_prompt_text(item), expected, got))
    n = len(items)
    return TaskScore(accuracy=correct / n if n else 0.0, n=n, correct=correct, examples=examples, misses=misses)


def evaluate_task(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    items: Sequence[dict[str, Any]],
    *,
    max_new_tokens: int = 16,
    batch_size: int = 16,
    on_progress: Callable[[int, int], None] | None = None,
) -> TaskScore:
    """Generate greedily for every item (batched, left-padded, with the chat template) and score.

    Works with any transformers causal LM and tokenizer; a tokenizer without a chat template is used with
    `DEFAULT_CHAT_TEMPLATE` (the one training renders with when a tokenizer has none), without modifying the tokenizer. The model
    runs in eval mode under `torch.no_grad()` and is put back in training mode afterwards if it was.

    4-bit QLoRA models: on CPUs with AVX512-BF16, bitsandbytes repacks 4-bit weights the first time they
    run in eval mode without gradients, and backward through a repacked layer is silently wrong. Calling
    this on a model that will be trained afterwards is the caller's responsibility: prevent or undo the
    repacking (see shared/design.md §6) or reload the model before training.

    on_progress(done, total): called after each batch with the number of items answered, so that a caller can show the
    measurement's own progress (a training run writes it as events: on a busy CPU this takes minutes).
    """
    import torch

    from ..models.tokenizer import DEFAULT_CHAT_TEMPLATE

    template = None if getattr(tokenizer, "chat_template", None) else DEFAULT_CHAT_TEMPLATE
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos_ids = eos_ids_of(model, tokenizer)
    device = next(model.parameters()).device
    was_training = model.training
    outputs: list[str] = []
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(items), max(1, batch_size)):
                batch = items[start : start + max(1, batch_size)]
                input_ids, attention_mask = left_padded_prompts(tokenizer, batch, template, pad_id)
                generated = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    num_beams=1,
                    pad_token_id=pad_id,
                    eos_token_id=eos_ids,
                )
                new_tokens = generated[:, input_ids.shape[1] :].cpu()
                outputs.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
                if on_progress is not None:
                    on_progress(len(outputs), len(items))
    finally:
        if was_training:
            model.train()
    return score_outputs(items, outputs)


def eos_ids_of(model: Any, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokenizer's eos plus any eos the model's generation config declares (some chat models end
    turns with a token other than their tokenizer's eos)."""
    ids: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in [tokenizer.eos_token_id, *(configured if isinstance(configured, list) else [configured])]:
        if value is not None and value not in ids:
            ids.append(int(value))
    return ids


def left_padded_prompts(
    tokenizer: PreTrainedTokenizerBase, batch: Sequence[dict[str, Any]], template: str | None, pad_id: int | None
) -> tuple[Any, Any]:
    """(input_ids, attention_mask) tensors of the chat prompts, padded on the left.

    Padded here rather than by switching `tokenizer.padding_side`, because the tokenizer may be shared with
    other threads (the playground's model cache).
    """
    import torch

    rows: list[list[int]] = []
    for item in batch:
        ids = tokenizer.apply_chat_template(
            to_messages(item, "instruction")[:-1],
            chat_template=template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
        rows.append(list(ids))
    width = max(len(r) for r in rows)
    pad = 0 if pad_id is None else pad_id
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return input_ids, attention_mask


if __name__ == "__main__":
    for written in write_date_files():
        print(f"wrote {written}")
