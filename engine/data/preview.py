"""Looking at a dataset before training: the first rows exactly as the model will see them (trained-on
tokens marked), and what tokenization keeps, truncates and drops (with row numbers and reasons).

Answers "what will my model actually be trained on?" before a run starts, with the same code the run uses
(engine/data/tokenize.py). The tokenizer comes from the caller: engine/training/data_check.py loads the one the
run will use and calls `inspect_records`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .files import BadRow
from .formats import RecordSet, record_texts
from .tokenize import IGNORE_INDEX, TooLong, check_options, check_tokenizer, encode_record, tokenize_records

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..config import TrainConfig

TRAINED_OPEN, TRAINED_CLOSE = "⟦", "⟧"  # marks trained-on spans in `preview`

@dataclass
class DataInspection:
    """What the data check shows: a markdown summary, the first rows as the model sees them, the length histogram
    and the dropped rows."""

    summary: str  # markdown
    preview: list[dict[str, Any]]  # row, text (trained spans in ⟦ ⟧), n_tokens, n_trainable
    histogram: list[dict[str, Any]]  # {"tokens": "17-32", "rows": n}
    dropped: list[list[Any]] = field(default_factory=list)  # [row, reason]


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
    check_options(max_seq_len, too_long)
    check_tokenizer(tokenizer, recordset.format)
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
            ids, labels, was_cut = encode_record(
                record, recordset.format, tokenizer, max_seq_len, train_on_prompt, too_long
            )
        except BadRow as why:
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


def inspect_records(
    cfg: TrainConfig,
    records: RecordSet,
    evals: RecordSet | None,
    tokenizer: PreTrainedTokenizerBase,
    which: str,
    n_preview: int = 3,
) -> DataInspection:
    """Preview + validation report of a run's training `records` (and eval records, or None) for `cfg`'s sequence
    length and masking, tokenized with `tokenizer` (described by `which` in the summary)."""
    notes = "".join(f"\n\n⚠ {n}" for n in records.notes)
    eval_line = (f"\n\nEval: **{evals.summary()}** (instead of the eval fraction)." if evals is not None
                 else f"\n\nEval: {cfg.eval_fraction:.0%} of the rows held out." if cfg.eval_fraction > 0 else "")
    if records.format == "text" or cfg.method == "scratch":
        n_tok = sum(len(tokenizer(t)["input_ids"]) + 1 for t in record_texts(records))
        summary = (f"**{records.summary()}** · plain text, packed into blocks of {cfg.max_seq_len} tokens: "
                   f"{n_tok:,} tokens → about {max(1, n_tok // cfg.max_seq_len)} blocks. (Preview uses {which}.)")
        rows = [{"row": r, "text": t[:500], "n_tokens": len(tokenizer(t)["input_ids"]), "n_trainable": None}
                for r, t in list(zip(records.rows, record_texts(records), strict=True))[:n_preview]]
        return DataInspection(summary + eval_line + notes, rows, [], [[n, why] for n, why in records.dropped])
    tok = tokenize_records(records, tokenizer, cfg.max_seq_len, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    rep = tok.report
    summary = (f"**{records.format}** format from {records.summary().split(' from ', 1)[-1]} · {rep.summary()} · long rows: "
               f"{'truncated' if cfg.too_long == 'truncate' else 'dropped'} at {cfg.max_seq_len} tokens · loss on "
               f"{'prompt and response' if cfg.train_on_prompt else 'responses only'} · ⟦ ⟧ marks trained-on tokens (preview uses {which}).")
    summary += " · " + step_summary(cfg, tok.examples)
    hist = [{"tokens": k, "rows": v} for k, v in rep.length_histogram.items()]
    dropped = [[n, why] for n, why in list(records.dropped) + list(rep.dropped)]
    shown = preview(records, tokenizer, cfg.max_seq_len, n_preview, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    return DataInspection(summary + eval_line + notes, shown, hist, dropped)


def step_summary(cfg: TrainConfig, examples: Sequence[dict[str, list[int]]]) -> str:
    """What one optimizer step sees (samples and real tokens) and the steps per epoch, with or without packing
    (engine/data/packing.py `pack_for_steps`), before the eval split: the numbers that set the schedule."""
    import math

    n = len(examples)
    if not n:
        return "no usable samples"
    accum, tokens = cfg.grad_accum, sum(len(e["input_ids"]) for e in examples)
    steps = math.ceil(math.ceil(n / cfg.micro_batch_size) / accum)
    text = (f"per optimizer step: about {min(n, cfg.micro_batch_size * accum):,} samples and "
            f"{tokens * min(1.0, cfg.micro_batch_size * accum / n):,.0f} tokens, {steps:,} steps per epoch")
    if cfg.packing:  # what the run will train on: rows holding several samples
        from .packing import pack_for_steps

        _, packed = pack_for_steps(examples, cfg.max_seq_len, cfg.micro_batch_size, keep_order=cfg.curriculum != "none")
        text += f" · packing: {packed.summary()}"
    return text
