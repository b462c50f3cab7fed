"""The data of the methods that do not learn from answers alone: preference pairs for DPO and ORPO, answers labelled
good or bad for KTO (preference pairs unpaired too), prompts (with the expected answer, for the rewards) for GRPO.

Both are rendered with the model's chat template exactly as supervised training renders them (engine/data/tokenize.py):
a pair is the prompt with the generation prompt, then each answer as the template writes an assistant turn (its end
token included), so the model compares the same tokens it would be trained on. `build_pair_data` / `build_prompt_data`
are what the run uses (engine/training/preference.py, engine/training/grpo.py), and `inspect_pairs` is the data check,
with the same code: what the check shows is what the trainer gets.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DataError, Phrase, dropped_reasons, for_people
from ..i18n import fmt_number, t
from ..objectives import PREFERENCE_METHODS
from .build import TrainData, check_labels_used, eval_records, train_records
from .files import BadRow, display_name
from .formats import RecordSet, to_messages
from .tokenize import split_eval

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..config import TrainConfig
    from .preview import DataInspection

CHOSEN_MARK, REJECTED_MARK = "✓", "✗"  # how the data check labels the two answers of a pair
GOOD_MARK, BAD_MARK = "✔", "✖"  # and a KTO row's answer marked good or bad (text symbols: no emoji font needed)


def render_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    """Token ids of `messages` through the chat template; `BadRow` when the template rejects them."""
    from jinja2.exceptions import TemplateError

    try:
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=True)
    except (TemplateError, ValueError, TypeError) as err:
        raise BadRow(Phrase("text.row.template", detail=str(err))) from None
    return list(out["input_ids"])


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def encode_pair(record: dict[str, Any], tokenizer: PreTrainedTokenizerBase, max_seq_len: int) -> dict[str, Any]:
    """`prompt_ids`, `chosen_ids`, `rejected_ids` (and `truncated`) of a normalized preference record: the prompt with
    the generation prompt, then each answer as the template continues it. Answers longer than what `max_seq_len` leaves
    after the prompt are cut; `BadRow` when the prompt alone fills it."""
    prompt_ids = render_ids(tokenizer, record["prompt"], True)
    out: dict[str, Any] = {"truncated": False}
    start = len(prompt_ids)
    for side in ("chosen", "rejected"):
        full = render_ids(tokenizer, record["prompt"] + record[side], False)
        start = min(start, _shared(prompt_ids, full))  # where prompt and answer part (some templates differ at the seam)
        out[side] = full
    if start >= max_seq_len - 1:
        raise BadRow(Phrase("text.row.prompt_fills_pair", max=max_seq_len))
    out["prompt_ids"] = prompt_ids[:start]
    for side in ("chosen", "rejected"):
        answer = out.pop(side)[start:]
        if not answer:
            raise BadRow(Phrase("text.row.empty_answer", key=side))
        room = max_seq_len - start
        out["truncated"] = out["truncated"] or len(answer) > room
        out[f"{side}_ids"] = answer[:room]
    if out["chosen_ids"] == out["rejected_ids"]:
        raise BadRow(Phrase("text.row.same_within", max=max_seq_len))
    return out


def prompt_and_answer(record: dict[str, Any], fmt: str) -> tuple[list[dict[str, str]], str]:
    """The prompt messages of a record and its reference answer (the last assistant turn; a pair's chosen answer), for
    GRPO: the model writes its own answers to the prompt, and rewards such as `dates` compare them with the reference."""
    if fmt == "text":
        raise BadRow(Phrase("text.row.no_prompt_text"))
    messages = to_messages(record, fmt)
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None or not any(m["role"] == "user" for m in messages[:last]):
        raise BadRow(Phrase("text.row.no_user_prompt"))
    return messages[:last], messages[last]["content"]


def encode_prompt(record: dict[str, Any], fmt: str, tokenizer: PreTrainedTokenizerBase, max_seq_len: int) -> dict[str, Any]:
    """A GRPO row: `prompt` (the text the model continues: the chat template with the generation prompt), `answer`
    (the reference answer, for the rewards) and `prompt_tokens`; `BadRow` when the prompt alone fills max_seq_len."""
    messages, answer = prompt_and_answer(record, fmt)
    ids = render_ids(tokenizer, messages, True)
    if len(ids) >= max_seq_len:
        raise BadRow(Phrase("text.row.prompt_tokens", n=len(ids), max=max_seq_len))
    # decoded with its special tokens: re-tokenizing the text gives the same ids (the trainer tokenizes text prompts)
    return {"prompt": tokenizer.decode(ids, skip_special_tokens=False), "answer": answer, "prompt_tokens": len(ids)}


def encode_completion(record: dict[str, Any], tokenizer: PreTrainedTokenizerBase, max_seq_len: int) -> dict[str, Any]:
    """A KTO row: `prompt_ids` (the prompt with the generation prompt), `completion_ids` (the answer as the template
    continues it, cut to what `max_seq_len` leaves), `label` (True: good) and `truncated`, from a labelled completion
    record (engine/data/preference_rows.py `norm_unpaired`)."""
    prompt_ids = render_ids(tokenizer, record["prompt"], True)
    full = render_ids(tokenizer, record["prompt"] + record["completion"], False)
    start = _shared(prompt_ids, full)
    if start >= max_seq_len - 1:
        raise BadRow(Phrase("text.row.prompt_fills_pair", max=max_seq_len))
    answer = full[start:]
    if not answer:
        raise BadRow(Phrase("text.row.empty_answer", key="completion"))
    room = max_seq_len - start
    return {"prompt_ids": prompt_ids[:start], "completion_ids": answer[:room], "label": bool(record["label"]), "truncated": len(answer) > room}


def unpair(record: dict[str, Any], fmt: str) -> list[dict[str, Any]]:
    """The labelled completions of a record: itself (unpaired data), or a pair's chosen answer marked good and its
    rejected one marked bad (trl's `unpair_preference_dataset`)."""
    if fmt == "unpaired":
        return [record]
    return [{"prompt": record["prompt"], "completion": record["chosen"], "label": True},
            {"prompt": record["prompt"], "completion": record["rejected"], "label": False}]


def _require(records: RecordSet, method: str) -> None:
    """The data `method` learns from: pairs for DPO/ORPO, labelled completions (or pairs, unpaired) for KTO."""
    if method == "kto":
        if records.format not in ("unpaired", "preference"):
            raise DataError(key="preference.msg.needs_labelled", source=display_name(records.source), format=records.format)
    elif records.format == "unpaired":  # answers labelled good or bad: offered KTO (engine/data/build.py)
        check_labels_used(records, cfg_method=method)
    elif records.format != "preference":
        raise DataError(key="preference.msg.needs_pairs", method=method, source=display_name(records.source), format=records.format)


def check_method_data(method: str, records: RecordSet) -> None:
    """The method against its data, before any tokenizer: DPO and ORPO need preference pairs, KTO pairs or labelled
    answers, GRPO prompts (any format but plain text); keyed `DataError` otherwise. Other methods learn from any format
    (labelled rows are refused for them where the rows are read: engine/data/formats.py)."""
    if method in PREFERENCE_METHODS:
        _require(records, method)
    elif method == "grpo" and records.format == "text":
        raise DataError(key="preference.msg.needs_prompts", source=display_name(records.source))


def _encode_all(records: RecordSet, encode: Any) -> tuple[list[dict[str, Any]], list[tuple[int, Any]]]:
    """Every record through `encode` (one example, or a list of them for KTO's unpaired pairs), with the dropped rows."""
    kept, dropped = [], []
    for number, record in zip(records.rows, records.records, strict=True):
        try:
            out = encode(record)
        except BadRow as why:
            dropped.append((number, why.args[0]))
            continue
        kept.extend(out if isinstance(out, list) else [out])
    return kept, dropped


def _train_data(cfg: TrainConfig, records: RecordSet, encode: Any, evals_of: Any, kind: str) -> TrainData:
    examples, dropped = _encode_all(records, encode)
    if not examples:
        raise DataError(key="preference.msg.no_rows", source=display_name(records.source),
                        first=dropped_reasons(list(records.dropped) + dropped, records.unit, 3))
    report: dict[str, Any] = {"format": records.format, "kind": kind, "rows_in": len(records.records) + len(records.dropped),
                              "rows_kept": len(examples), "dropped": list(records.dropped) + dropped,
                              "truncated": sum(1 for e in examples if e.pop("truncated", False))}
    other = eval_records(cfg)
    if other is not None:
        evals, eval_dropped = _encode_all(other, evals_of(other))
        train = examples
        report["eval_source"] = other.summary()
        report["eval_dropped"] = len(eval_dropped)
    else:
        train, evals = split_eval(examples, cfg.eval_fraction, cfg.seed) if cfg.eval_fraction > 0 and len(examples) >= 10 else (examples, [])
    for e in evals:
        e.pop("truncated", None)
    report.update({"train_examples": len(train), "eval_examples": len(evals)})
    return TrainData(train, evals, report)


def build_pair_data(cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase, max_len: int) -> TrainData:
    """The data of a DPO/ORPO run (pairs: prompt_ids, chosen_ids, rejected_ids) or a KTO run (labelled completions:
    prompt_ids, completion_ids, label; pairs are unpaired, and the rows shuffled once with the run's seed, since trl
    reads them in order); `DataError` (keyed) when the data is not of the method's shape or no row is usable."""
    records = train_records(cfg)
    _require(records, cfg.method)

    def encoder(rs: RecordSet) -> Any:
        if cfg.method == "kto":
            return lambda r: [encode_completion(c, tokenizer, max_len) for c in unpair(r, rs.format)]
        return lambda r: encode_pair(r, tokenizer, max_len)

    def evals_of(other: RecordSet) -> Any:
        _require(other, cfg.method)
        return encoder(other)

    data = _train_data(cfg, records, encoder(records), evals_of, "labelled" if cfg.method == "kto" else "pairs")
    if cfg.method == "kto":
        good = sum(1 for e in data.train if e["label"])
        if good in (0, len(data.train)):
            raise DataError(key="preference.msg.one_label", source=display_name(records.source), which=GOOD_MARK if good else BAD_MARK)
        # trl's KTO reads its rows in order (each row's KL answer is its neighbour's): a shuffle here keeps a file's
        # order (all good answers first, or a pair's two answers side by side) from reaching a batch
        random.Random(cfg.seed).shuffle(data.train)
        data.report.update(good=good, bad=len(data.train) - good)
    return data


def build_prompt_data(cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase, max_len: int) -> TrainData:
    """The prompts of a GRPO run (with the reference answers); `DataError` (keyed) for plain-text data or when no
    prompt is usable. max_len bounds the prompt: the answers get `max_completion_length` more tokens."""
    records = train_records(cfg)
    if records.format == "text":
        raise DataError(key="preference.msg.needs_prompts", source=display_name(records.source))
    return _train_data(cfg, records, lambda r: encode_prompt(r, records.format, tokenizer, max_len),
                       lambda other: (lambda r: encode_prompt(r, other.format, tokenizer, max_len)), "prompts")


def _shown(cfg: TrainConfig, records: RecordSet, record: dict[str, Any], tokenizer: PreTrainedTokenizerBase) -> list[tuple[Any, ...]]:
    """What the data check shows of one record for `cfg.method`: (text, tokens, trained tokens, KTO label) per example."""
    def dec(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    if cfg.method in ("dpo", "orpo"):
        e = encode_pair(record, tokenizer, cfg.max_seq_len)
        text = dec(e["prompt_ids"]) + f"\n{CHOSEN_MARK} " + dec(e["chosen_ids"]) + f"\n{REJECTED_MARK} " + dec(e["rejected_ids"])
        return [(text, len(e["prompt_ids"]) + max(len(e["chosen_ids"]), len(e["rejected_ids"])), len(e["chosen_ids"]) + len(e["rejected_ids"]), None)]
    if cfg.method == "kto":
        out = []
        for c in unpair(record, records.format):
            e = encode_completion(c, tokenizer, cfg.max_seq_len)
            mark = GOOD_MARK if e["label"] else BAD_MARK
            out.append((dec(e["prompt_ids"]) + f"\n{mark} " + dec(e["completion_ids"]), len(e["prompt_ids"]) + len(e["completion_ids"]),
                        len(e["completion_ids"]), e["label"]))
        return out
    e = encode_prompt(record, records.format, tokenizer, cfg.max_seq_len)
    return [(e["prompt"] + f"\n→ {e['answer']}", e["prompt_tokens"], None, None)]


def inspect_pairs(cfg: TrainConfig, records: RecordSet, tokenizer: PreTrainedTokenizerBase, which: str, n_preview: int = 3,
                  lang: str = "en") -> DataInspection:
    """The data check of a DPO/ORPO/KTO/GRPO run: the first rows exactly as the trainer gets them (a pair: the prompt,
    then ✓ the chosen and ✗ the rejected answer, each as the template continues the prompt; a KTO row: the prompt, then
    ✔ or ✖ and the answer; a GRPO prompt: the text the model continues and the reference answer the rewards compare
    with), the length histogram and the dropped rows, in `lang`."""
    from .preview import DataInspection
    from .tokenize import length_histogram

    check_method_data(cfg.method, records)
    shown, lengths, dropped, labels = [], [], list(records.dropped), []
    for number, record in zip(records.rows, records.records, strict=True):
        try:
            items = _shown(cfg, records, record, tokenizer)
        except BadRow as why:
            dropped.append((number, why.args[0]))
            continue
        for text, n, trained, label in items:
            lengths.append(n)
            labels.append(bool(label))
            if len(shown) < n_preview:
                shown.append({"row": number, "text": text, "n_tokens": n, "n_trainable": trained})
    key = {"dpo": "preference.check.pairs", "orpo": "preference.check.pairs", "kto": "preference.check.labelled"}.get(cfg.method, "preference.check.prompts")
    good = sum(labels)
    summary = t(key, lang, n=fmt_number(len(lengths), lang), source=display_name(records.source), format=records.format,
                dropped=fmt_number(len(dropped), lang), longest=fmt_number(max(lengths, default=0), lang),
                max_len=fmt_number(cfg.max_seq_len, lang), which=which, good=fmt_number(good, lang), bad=fmt_number(len(labels) - good, lang))
    if dropped:
        first = "; ".join(r.render(lang) for r in dropped_reasons(dropped, records.unit, 3))
        summary += " " + t("finetune.check.dropped", lang, n=fmt_number(len(dropped), lang), first=first + ("; ..." if len(dropped) > 3 else ""))
    hist = [{"tokens": k, "rows": v} for k, v in length_histogram(lengths, cfg.max_seq_len).items()]
    notes = "".join(f"\n\n⚠ {for_people(note, lang)}" for note in records.notes)
    return DataInspection(summary + notes, shown, hist, [[n, for_people(why, lang)] for n, why in dropped])
