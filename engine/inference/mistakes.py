"""On-policy preference pairs for the date task: the model's own mistakes as the rejected answers.

Off-policy pairs (builtin:preferences: a swapped day and month, the input order kept, slashes) teach a model to rank
mistakes it may never make; docs/preference.md measures that DPO on them does not raise the date accuracy. Here the
model itself answers date prompts of the task's training split that the built-in training file does not hold (never the test split's): its greedy answer (the one the date task
scores) and a few sampled ones. The date checker (engine/inference/tasks.py `score_outputs`) marks each right or
wrong, and every distinct wrong answer becomes a pair: the expected date chosen, the model's mistake rejected.

- `mistake_pairs(model, tokenizer, items, ...)`: the pairs and what was found (`MistakeStats`).
- `write_pairs(pairs, path)`: a preference JSONL file (prompt, chosen, rejected) any DPO/ORPO/KTO run reads.

The run uses it for the built-in dataset `builtin:date-mistakes` (engine/training/run.py: the pairs come from the
starting model, right before training), and the CLI for a file (`python -m engine pairs --from-run NAME`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .tasks import eos_ids_of, left_padded_prompts, normalize_answer

# prompts answered (`mistake_prompts`: past the built-in training file; the test split is never used) and sampled
# answers per prompt besides the greedy one: about 3 distinct mistakes a prompt from a model at ~25%, ~700 pairs, in a
# minute or two of generation on a 2-core CPU (docs/preference.md)
N_PROMPTS = 256
N_SAMPLES = 3
TEMPERATURE = 1.0  # sampling temperature: mistakes the model makes when it explores, not only its first choice
MAX_NEW_TOKENS = 16  # an ISO date is 5-11 tokens with the built-in tokenizer; the scorer reads the first line


def mistake_prompts() -> list[dict[str, str]]:
    """The N_PROMPTS date prompts the model answers: the date task's training split just past the built-in training file
    (builtin:dates is its first TRAIN_SIZE items), never the test split. A model fine-tuned on builtin:dates has not seen
    them, so its mistakes there are the ones it makes on new dates, as on the test: on the dates it trained on, a run at
    88% got all 256 right and made 19 pairs from sampled answers only, and ORPO on them lowered the task (88% -> 62-78%),
    where these prompts gave it 72-75 pairs and ORPO held it (89-90%, docs/preference.md)."""
    from .tasks import TRAIN_SIZE, date_items

    return date_items("train", TRAIN_SIZE + N_PROMPTS)[TRAIN_SIZE:]


@dataclass
class MistakeStats:
    """What sampling found: prompts answered, answers written, how many were right, pairs made."""

    prompts: int
    answers: int
    correct: int
    greedy_correct: int
    pairs: int
    prompts_with_pairs: int

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict (the run's `data` event, the CLI's output)."""
        return asdict(self)


def _prompt(item: dict[str, Any]) -> str:
    return item["instruction"] + (f"\n\n{item['input']}" if str(item.get("input") or "").strip() else "")


def _answers(model: Any, tokenizer: Any, batch: Sequence[dict[str, Any]], n: int, temperature: float, max_new_tokens: int) -> list[list[str]]:
    """For each item of `batch`: the greedy answer, then `n` sampled ones (decoded, special tokens removed)."""
    import torch

    from ..models.tokenizer import DEFAULT_CHAT_TEMPLATE

    template = None if getattr(tokenizer, "chat_template", None) else DEFAULT_CHAT_TEMPLATE
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids, mask = left_padded_prompts(tokenizer, batch, template, pad_id)
    device = next(model.parameters()).device
    common = {"input_ids": input_ids.to(device), "attention_mask": mask.to(device), "max_new_tokens": max_new_tokens,
              "pad_token_id": pad_id, "eos_token_id": eos_ids_of(model, tokenizer)}
    width = input_ids.shape[1]
    with torch.no_grad():
        greedy = model.generate(**common, do_sample=False, num_beams=1)[:, width:]
        out = [[tokenizer.decode(g, skip_special_tokens=True)] for g in greedy.cpu()]
        if n > 0:
            sampled = model.generate(**common, do_sample=True, temperature=temperature, top_p=1.0, top_k=0, num_return_sequences=n)[:, width:]
            texts = tokenizer.batch_decode(sampled.cpu(), skip_special_tokens=True)
            for i in range(len(batch)):
                out[i] += texts[i * n : (i + 1) * n]
    return out


def mistake_pairs(model: Any, tokenizer: Any, items: Sequence[dict[str, Any]], *, samples: int = N_SAMPLES, temperature: float = TEMPERATURE,
                  max_new_tokens: int = MAX_NEW_TOKENS, seed: int = 0, batch_size: int = 32,
                  on_progress: Callable[[int, int], None] | None = None) -> tuple[list[dict[str, str]], MistakeStats]:
    """Preference pairs from the model's own wrong answers to `items` (date-task records: instruction, input, output).

    Each item is answered greedily and `samples` times at `temperature`; every distinct wrong answer (by the date
    task's scorer) is paired with the expected one: {"prompt", "chosen": expected, "rejected": the model's answer}.
    Items the model always gets right give no pair. The model is put back in its training mode afterwards."""
    import torch

    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    pairs: list[dict[str, str]] = []
    answers = correct = greedy_correct = with_pairs = 0
    try:
        for start in range(0, len(items), max(1, batch_size)):
            batch = items[start : start + max(1, batch_size)]
            for item, texts in zip(batch, _answers(model, tokenizer, batch, samples, temperature, max_new_tokens), strict=True):
                expected = str(item["output"]).strip()
                seen: set[str] = set()
                made = 0
                for k, text in enumerate(texts):
                    answers += 1
                    got = normalize_answer(text)
                    if got == expected:
                        correct += 1
                        greedy_correct += k == 0
                        continue
                    if got in seen or not text.strip():
                        continue
                    seen.add(got)
                    pairs.append({"prompt": _prompt(item), "chosen": expected, "rejected": text.strip()})
                    made += 1
                with_pairs += made > 0
            if on_progress is not None:
                on_progress(min(start + len(batch), len(items)), len(items))
    finally:
        model.train(was_training)
    return pairs, MistakeStats(len(items), answers, correct, greedy_correct, len(pairs), with_pairs)


def write_pairs(pairs: Sequence[dict[str, str]], path: Path) -> Path:
    """Write `pairs` as preference JSONL (one {"prompt", "chosen", "rejected"} a line), atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
    tmp.replace(path)
    return path
