"""Looking at a dataset before training: the first rows exactly as the model will see them (trained-on
tokens marked), and what tokenization keeps, truncates and drops (with row numbers and reasons).

Answers "what will my model actually be trained on?" before a run starts, with the same code the run uses
(engine/data/tokenize.py). The tokenizer comes from the caller: engine/training/data_check.py loads the one the
run will use and calls `inspect_records`. The report's texts come in the visitor's language (`lang`, engine/i18n.py); the
reasons a row was dropped are the data layer's own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import dropped_reasons, for_people
from ..i18n import fmt_number, t
from .files import BadRow, display_name
from .formats import RecordSet, record_texts
from .tokenize import IGNORE_INDEX, TooLong, check_options, check_tokenizer, encode_record, tokenize_records

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..config import TrainConfig
    from .packing import PackReport
    from .tokenize import DataReport

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
            item["dropped"] = why.args[0]  # a Phrase (English as text; inspect_records renders it in the page's language)
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


def records_text(records: RecordSet, lang: str = "en") -> str:
    """'194 instruction rows from instructions.jsonl (2 dropped)' in `lang`."""
    text = t("finetune.check.records", lang, n=fmt_number(len(records.records), lang), format=records.format, source=display_name(records.source))
    return text + (" " + t("finetune.check.records_dropped", lang, n=fmt_number(len(records.dropped), lang)) if records.dropped else "")


def report_text(rep: DataReport, lang: str = "en") -> str:
    """What tokenization kept, in `lang`: rows kept, tokens (trained on), longest and mean length, truncated and dropped
    rows (the first three with their reasons)."""
    parts = [t("finetune.check.kept", lang, kept=fmt_number(rep.rows_kept, lang), total=fmt_number(rep.rows_in, lang)),
             t("finetune.check.tokens", lang, n=fmt_number(rep.n_tokens, lang), trained=fmt_number(rep.n_trainable_tokens, lang)),
             t("finetune.check.lengths", lang, longest=fmt_number(rep.max_len, lang), mean=fmt_number(round(rep.mean_len), lang))]
    if rep.truncated:
        parts.append(t("finetune.check.truncated", lang, n=fmt_number(rep.truncated, lang)))
    if rep.dropped:
        first = "; ".join(r.render(lang) for r in dropped_reasons(rep.dropped, rep.unit, 3))
        parts.append(t("finetune.check.dropped", lang, n=fmt_number(len(rep.dropped), lang), first=first + ("; ..." if len(rep.dropped) > 3 else "")))
    return ", ".join(parts)


def pack_text(packed: PackReport, lang: str = "en") -> str:
    """What packing does to a micro-batch, in `lang` (engine/data/packing.py PackReport)."""
    per = max(1, packed.micro_batches)
    return t("finetune.check.packed", lang, samples=fmt_number(round(packed.samples / per, 1), lang, 1),
             rows=fmt_number(round(packed.rows / per, 1), lang, 1), max_len=fmt_number(packed.max_len, lang),
             pct=fmt_number(round(100 * packed.share), lang))


def inspect_records(
    cfg: TrainConfig,
    records: RecordSet,
    evals: RecordSet | None,
    tokenizer: PreTrainedTokenizerBase,
    which: str,
    n_preview: int = 3,
    lang: str = "en",
) -> DataInspection:
    """Preview + validation report of a run's training `records` (and eval records, or None) for `cfg`'s sequence
    length and masking, tokenized with `tokenizer` (described by `which` in the summary), in `lang`."""
    notes = "".join(f"\n\n⚠ {for_people(n, lang)}" for n in records.notes)
    eval_line = ("\n\n" + t("finetune.check.eval_set", lang, records=records_text(evals, lang)) if evals is not None
                 else "\n\n" + t("finetune.check.eval_fraction", lang, pct=fmt_number(round(100 * cfg.eval_fraction), lang)) if cfg.eval_fraction > 0 else "")
    if records.format == "text" or cfg.method == "scratch":
        n_tok = sum(len(tokenizer(t_)["input_ids"]) + 1 for t_ in record_texts(records))
        summary = t("finetune.check.text_summary", lang, records=records_text(records, lang), block=fmt_number(cfg.max_seq_len, lang),
                    tokens=fmt_number(n_tok, lang), blocks=fmt_number(max(1, n_tok // cfg.max_seq_len), lang), which=which)
        rows = [{"row": r, "text": t_[:500], "n_tokens": len(tokenizer(t_)["input_ids"]), "n_trainable": None}
                for r, t_ in list(zip(records.rows, record_texts(records), strict=True))[:n_preview]]
        return DataInspection(summary + eval_line + notes, rows, [], [[n, for_people(why, lang)] for n, why in records.dropped])
    tok = tokenize_records(records, tokenizer, cfg.max_seq_len, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    rep = tok.report
    summary = t("finetune.check.summary", lang, format=records.format, source=display_name(records.source), report=report_text(rep, lang),
                long=t("finetune.check.long_truncated" if cfg.too_long == "truncate" else "finetune.check.long_dropped", lang),
                max_len=fmt_number(cfg.max_seq_len, lang),
                loss_on=t("finetune.check.loss_all" if cfg.train_on_prompt else "finetune.check.loss_responses", lang), which=which)
    summary += " · " + step_summary(cfg, tok.examples, lang)
    hist = [{"tokens": k, "rows": v} for k, v in rep.length_histogram.items()]
    dropped = [[n, for_people(why, lang)] for n, why in list(records.dropped) + list(rep.dropped)]
    shown = preview(records, tokenizer, cfg.max_seq_len, n_preview, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    for item in shown:
        if item.get("dropped") is not None:
            item["dropped"] = for_people(item["dropped"], lang)
    return DataInspection(summary + eval_line + notes, shown, hist, dropped)


def step_summary(cfg: TrainConfig, examples: Sequence[dict[str, list[int]]], lang: str = "en") -> str:
    """What one optimizer step sees (samples and real tokens) and the steps per epoch, with or without packing
    (packing changes neither: engine/data/packing.py), before the eval split: the numbers that set the schedule."""
    import math

    n = len(examples)
    if not n:
        return t("finetune.check.no_samples", lang)
    accum, tokens = cfg.grad_accum, sum(len(e["input_ids"]) for e in examples)
    steps = math.ceil(math.ceil(n / cfg.micro_batch_size) / accum)
    text = t("finetune.check.per_step", lang, samples=fmt_number(min(n, cfg.micro_batch_size * accum), lang),
             tokens=fmt_number(round(tokens * min(1.0, cfg.micro_batch_size * accum / n)), lang), steps=fmt_number(steps, lang))
    if cfg.packing:  # what the run will compute: each micro-batch's samples in fewer rows
        import torch

        from .packing import packed_row_multiple, plan_packing

        multiple = packed_row_multiple(cfg.max_seq_len, "cuda" if torch.cuda.is_available() else "cpu")
        packed = plan_packing([len(e["input_ids"]) for e in examples], cfg.max_seq_len, cfg.micro_batch_size, seed=cfg.seed,
                              shuffle=cfg.curriculum == "none", multiple=multiple)
        text += " · " + t("finetune.check.packing", lang, what=pack_text(packed, lang))
    return text
