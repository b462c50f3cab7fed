"""The data of the methods that do not learn from answers alone: preference pairs for DPO and ORPO, prompts (with
the expected answer, for the rewards) for GRPO.

Both are rendered with the model's chat template exactly as supervised training renders them (engine/data/tokenize.py):
a pair is the prompt with the generation prompt, then each answer as the template writes an assistant turn (its end
token included), so the model compares the same tokens it would be trained on. `build_pair_data` / `build_prompt_data`
are what the run uses (engine/training/preference.py, engine/training/grpo.py), and `inspect_pairs` is the data check,
with the same code: what the check shows is what the trainer gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DataError
from ..i18n import fmt_number, t
from .build import TrainData, eval_records, train_records
from .files import BadRow, display_name
from .formats import RecordSet, to_messages
from .tokenize import split_eval

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..config import TrainConfig
    from .preview import DataInspection

CHOSEN_MARK, REJECTED_MARK = "✓", "✗"  # how the data check labels the two answers of a pair


def render_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    """Token ids of `messages` through the chat template; `BadRow` when the template rejects them."""
    from jinja2.exceptions import TemplateError

    try:
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=True)
    except (TemplateError, ValueError, TypeError) as err:
        raise BadRow(f"the chat template rejected this conversation: {err}") from None
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
        raise BadRow(f"the prompt alone fills max_seq_len ({max_seq_len} tokens); nothing left to compare")
    out["prompt_ids"] = prompt_ids[:start]
    for side in ("chosen", "rejected"):
        answer = out.pop(side)[start:]
        if not answer:
            raise BadRow(f"empty '{side}' answer")
        room = max_seq_len - start
        out["truncated"] = out["truncated"] or len(answer) > room
        out[f"{side}_ids"] = answer[:room]
    if out["chosen_ids"] == out["rejected_ids"]:
        raise BadRow(f"'chosen' and 'rejected' are the same within max_seq_len ({max_seq_len} tokens): nothing to prefer")
    return out


def prompt_and_answer(record: dict[str, Any], fmt: str) -> tuple[list[dict[str, str]], str]:
    """The prompt messages of a record and its reference answer (the last assistant turn; a pair's chosen answer), for
    GRPO: the model writes its own answers to the prompt, and rewards such as `dates` compare them with the reference."""
    if fmt == "text":
        raise BadRow("plain text has no prompt to answer")
    messages = to_messages(record, fmt)
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None or not any(m["role"] == "user" for m in messages[:last]):
        raise BadRow("no user prompt before an assistant answer")
    return messages[:last], messages[last]["content"]


def encode_prompt(record: dict[str, Any], fmt: str, tokenizer: PreTrainedTokenizerBase, max_seq_len: int) -> dict[str, Any]:
    """A GRPO row: `prompt` (the text the model continues: the chat template with the generation prompt), `answer`
    (the reference answer, for the rewards) and `prompt_tokens`; `BadRow` when the prompt alone fills max_seq_len."""
    messages, answer = prompt_and_answer(record, fmt)
    ids = render_ids(tokenizer, messages, True)
    if len(ids) >= max_seq_len:
        raise BadRow(f"the prompt alone is {len(ids)} tokens, max_seq_len is {max_seq_len}")
    # decoded with its special tokens: re-tokenizing the text gives the same ids (the trainer tokenizes text prompts)
    return {"prompt": tokenizer.decode(ids, skip_special_tokens=False), "answer": answer, "prompt_tokens": len(ids)}


def _require_pairs(records: RecordSet, method: str) -> None:
    if records.format != "preference":
        raise DataError(key="preference.msg.needs_pairs", method=method, source=display_name(records.source), format=records.format)


def check_method_data(method: str, records: RecordSet) -> None:
    """The method against its data, before any tokenizer: DPO and ORPO need preference pairs, GRPO prompts (any format
    but plain text); keyed `DataError` otherwise. Other methods learn from any format."""
    if method in ("dpo", "orpo"):
        _require_pairs(records, method)
    elif method == "grpo" and records.format == "text":
        raise DataError(key="preference.msg.needs_prompts", source=display_name(records.source))


def _encode_all(records: RecordSet, encode: Any) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    kept, dropped = [], []
    for number, record in zip(records.rows, records.records, strict=True):
        try:
            kept.append(encode(record))
        except BadRow as why:
            dropped.append((number, str(why)))
    return kept, dropped


def _train_data(cfg: TrainConfig, records: RecordSet, encode: Any, evals_of: Any, kind: str) -> TrainData:
    examples, dropped = _encode_all(records, encode)
    if not examples:
        first = "; ".join(f"{records.unit} {n}: {why}" for n, why in (list(records.dropped) + dropped)[:3])
        raise DataError(key="preference.msg.no_rows", source=display_name(records.source), first=first)
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
    """The preference pairs of a DPO/ORPO run (tokenized: prompt_ids, chosen_ids, rejected_ids); `DataError` (keyed)
    when the data is not preference pairs or no pair is usable."""
    records = train_records(cfg)
    _require_pairs(records, cfg.method)

    def evals_of(other: RecordSet) -> Any:
        _require_pairs(other, cfg.method)
        return lambda r: encode_pair(r, tokenizer, max_len)

    return _train_data(cfg, records, lambda r: encode_pair(r, tokenizer, max_len), evals_of, "pairs")


def build_prompt_data(cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase, max_len: int) -> TrainData:
    """The prompts of a GRPO run (with the reference answers); `DataError` (keyed) for plain-text data or when no
    prompt is usable. max_len bounds the prompt: the answers get `max_completion_length` more tokens."""
    records = train_records(cfg)
    if records.format == "text":
        raise DataError(key="preference.msg.needs_prompts", source=display_name(records.source))
    return _train_data(cfg, records, lambda r: encode_prompt(r, records.format, tokenizer, max_len),
                       lambda other: (lambda r: encode_prompt(r, other.format, tokenizer, max_len)), "prompts")


def inspect_pairs(cfg: TrainConfig, records: RecordSet, tokenizer: PreTrainedTokenizerBase, which: str, n_preview: int = 3,
                  lang: str = "en") -> DataInspection:
    """The data check of a DPO/ORPO/GRPO run: the first rows exactly as the trainer gets them (a pair: the prompt, then
    ✓ the chosen and ✗ the rejected answer, each as the template continues the prompt; a GRPO prompt: the text the model
    continues and the reference answer the rewards compare with), the length histogram and the dropped rows."""
    from .preview import DataInspection
    from .tokenize import length_histogram

    pairs = cfg.method in ("dpo", "orpo")
    check_method_data(cfg.method, records)
    shown, lengths, dropped = [], [], list(records.dropped)
    for number, record in zip(records.rows, records.records, strict=True):
        try:
            if pairs:
                e = encode_pair(record, tokenizer, cfg.max_seq_len)
                n = len(e["prompt_ids"]) + max(len(e["chosen_ids"]), len(e["rejected_ids"]))
                text = (tokenizer.decode(e["prompt_ids"], skip_special_tokens=False)
                        + f"\n{CHOSEN_MARK} " + tokenizer.decode(e["chosen_ids"], skip_special_tokens=False)
                        + f"\n{REJECTED_MARK} " + tokenizer.decode(e["rejected_ids"], skip_special_tokens=False))
                trained = len(e["chosen_ids"]) + len(e["rejected_ids"])
            else:
                e = encode_prompt(record, records.format, tokenizer, cfg.max_seq_len)
                n, text, trained = e["prompt_tokens"], e["prompt"] + f"\n→ {e['answer']}", None
        except BadRow as why:
            dropped.append((number, str(why)))
            continue
        lengths.append(n)
        if len(shown) < n_preview:
            shown.append({"row": number, "text": text, "n_tokens": n, "n_trainable": trained})
    key = "preference.check.pairs" if pairs else "preference.check.prompts"
    summary = t(key, lang, n=fmt_number(len(lengths), lang), source=display_name(records.source), format=records.format,
                dropped=fmt_number(len(dropped), lang), longest=fmt_number(max(lengths, default=0), lang),
                max_len=fmt_number(cfg.max_seq_len, lang), which=which)
    if dropped:
        first = "; ".join(f"{records.unit} {n}: {why}" for n, why in dropped[:3])
        summary += " " + t("finetune.check.dropped", lang, n=fmt_number(len(dropped), lang), first=first + ("; ..." if len(dropped) > 3 else ""))
    hist = [{"tokens": k, "rows": v} for k, v in length_histogram(lengths, cfg.max_seq_len).items()]
    return DataInspection(summary + "".join(f"\n\n⚠ {note}" for note in records.notes), shown, hist, [[n, why] for n, why in dropped])

