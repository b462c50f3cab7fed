"""Tokenization: records -> model-ready examples with prompt masking, plain text -> pretraining blocks, and the
eval split.

    tokenize_records(rs, tok, L)    -> TokenizedData  input_ids / labels / attention_mask + DataReport
    chunk_corpus(texts, tok, L)     -> blocks         concatenate + cut, for pretraining from scratch
    split_eval(examples, f, seed)   -> (train, eval)

The three chat-like formats go through the tokenizer's chat template; the loss covers only the assistant turns,
each ending with the eos token, unless ``train_on_prompt``. Text rows are tokenized as they are, with eos appended.
The tokenizer comes from the caller, ready: chat-like data needs a chat template and a pad token, which
engine/models/tokenizer.py `ensure_chat_template` gives it (every loader of engine/models applies it; the data
layer never imports the models). The result is plain Python lists; the trainer packs several short examples into
each row (engine/data/packing.py) or pads them like
`transformers.DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100)`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, DataError, Phrase, dropped_reasons
from .files import BadRow, display_name
from .formats import Format, RecordSet, to_messages

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TooLong = Literal["truncate", "drop"]
IGNORE_INDEX = -100  # label value ignored by the loss (PyTorch cross-entropy / transformers)


@dataclass
class DataReport:
    """What tokenization did to a dataset: counts, lengths and the rows dropped with their reasons."""

    rows_in: int
    rows_kept: int
    dropped: list[tuple[int, str]]
    n_tokens: int
    n_trainable_tokens: int
    max_len: int
    mean_len: float
    length_histogram: dict[str, int]  # "17-32" -> number of kept examples of that many tokens
    truncated: int = 0
    unit: str = "line"
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """A short human-readable summary for logs and the UI."""
        parts = [
            f"{self.rows_kept}/{self.rows_in} rows kept",
            f"{self.n_tokens} tokens ({self.n_trainable_tokens} trained on)",
            f"longest {self.max_len}, mean {self.mean_len:.0f}",
        ]
        if self.truncated:
            parts.append(f"{self.truncated} truncated")
        if self.dropped:
            first = "; ".join(f"{self.unit} {n}: {why}" for n, why in self.dropped[:3])
            parts.append(f"{len(self.dropped)} dropped ({first}{'; ...' if len(self.dropped) > 3 else ''})")
        return ", ".join(parts)


@dataclass
class TokenizedData:
    """Model-ready examples (`input_ids`, `labels`, `attention_mask` as int lists) and their report."""

    examples: list[dict[str, list[int]]]
    report: DataReport
    format: Format = "text"

    def __len__(self) -> int:
        return len(self.examples)



def tokenize_records(
    recordset: RecordSet,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_len: int,
    *,
    train_on_prompt: bool = False,
    too_long: TooLong = "truncate",
) -> TokenizedData:
    """Turn records into model-ready examples.

    Chat-like formats: rendered with the tokenizer's chat template (the caller gives a tokenizer that has
    none the default one: see the module docstring); labels are `IGNORE_INDEX` except
    on assistant turns (every token when `train_on_prompt`). Each assistant turn's labels end with the eos
    token: the template's own when it writes it, otherwise eos is inserted after the turn. Text format:
    the text plus eos, every token trained.

    Rows longer than `max_seq_len` are cut (`too_long="truncate"`, counted in `report.truncated`) or
    dropped (`"drop"`); rows left with nothing to train on are dropped. All drops are reported.
    """
    check_options(max_seq_len, too_long)
    notes = check_tokenizer(tokenizer, recordset.format)
    examples: list[dict[str, list[int]]] = []
    dropped = list(recordset.dropped)
    truncated = 0
    for number, record in zip(recordset.rows, recordset.records, strict=True):
        try:
            ids, labels, was_cut = encode_record(
                record, recordset.format, tokenizer, max_seq_len, train_on_prompt, too_long
            )
        except BadRow as why:
            dropped.append((number, why.args[0]))  # a Phrase: rendered in the reader's language by the data check
            continue
        truncated += was_cut
        examples.append({"input_ids": ids, "labels": labels, "attention_mask": [1] * len(ids)})
    dropped.sort()
    if not examples:
        reasons = dropped_reasons(dropped, recordset.unit)
        raise DataError(key="error.data.none_after_tokens", file=display_name(recordset.source), reasons=reasons)
    report = _report(examples, dropped, len(recordset.records) + len(recordset.dropped), truncated, max_seq_len)
    report.unit, report.notes = recordset.unit, notes
    return TokenizedData(examples, report, recordset.format)


def check_options(max_seq_len: int, too_long: str) -> None:
    """`ConfigError` for a sequence length or long-row policy that tokenization cannot use."""
    if not isinstance(max_seq_len, int) or max_seq_len < 2:
        raise ConfigError("max_seq_len", max_seq_len, "a whole number of tokens, at least 2")
    if too_long not in ("truncate", "drop"):
        raise ConfigError("too_long", too_long, "'truncate' or 'drop'")


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, fmt: Format) -> list[str]:
    """The report's notes about the tokenizer; `ValueError` when chat-like data meets a tokenizer without a chat
    template (the caller readies it: engine/models/tokenizer.py `ensure_chat_template`)."""
    if fmt != "text" and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{fmt} data needs a tokenizer with a chat template; give it one first "
            "(engine.models.tokenizer.ensure_chat_template adds the default one, as every model loader does)."
        )
    notes = []
    if tokenizer.eos_token_id is None:
        notes.append(Phrase("text.note.no_eos"))
    return notes


def encode_record(
    record: dict[str, Any],
    fmt: Format,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_len: int,
    train_on_prompt: bool,
    too_long: str,
) -> tuple[list[int], list[int], bool]:
    """(input_ids, labels, truncated?) of one record; raises `BadRow` when it must be dropped."""
    if fmt == "text":
        ids = _encode_text(record["text"], tokenizer)
        labels = list(ids)
    else:
        ids, labels = _encode_chat(to_messages(record, fmt), tokenizer, train_on_prompt)
    was_cut = False
    if len(ids) > max_seq_len:
        if too_long == "drop":
            raise BadRow(Phrase("text.row.too_long", n=len(ids), max=max_seq_len))
        ids, labels, was_cut = ids[:max_seq_len], labels[:max_seq_len], True
    # labels are shifted inside the model: position 0 is never a target
    if not any(label != IGNORE_INDEX for label in labels[1:]):
        if was_cut:
            raise BadRow(Phrase("text.row.prompt_fills", max=max_seq_len))
        raise BadRow(Phrase("text.row.no_tokens"))
    return ids, labels, was_cut


def _encode_text(text: str, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    return _encode_texts([text], tokenizer)


def _encode_texts(texts: list[str], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids of the texts one after another, each followed by eos (batched: much faster)."""
    if not texts:
        return []
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    # add_special_tokens=True lets tokenizers that expect a bos (Llama, Gemma) get it; ours adds nothing.
    for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]:
        stream.extend(ids)
        if eos is not None and (not ids or ids[-1] != eos):
            stream.append(eos)
    return stream


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    from jinja2.exceptions import TemplateError

    try:
        out = tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=True
        )
    except (TemplateError, ValueError, TypeError) as err:
        raise BadRow(Phrase("text.row.template", detail=str(err)[:200])) from None
    return list(out["input_ids"])


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _assistant_spans(
    messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, full: list[int]
) -> list[tuple[int, int]]:
    """Token spans [start, end) of the assistant turns inside `full`.

    start = length of the conversation up to the turn rendered with the generation prompt; end = length
    of the conversation including the turn. Templates are normally prefix-stable; when one is not, the
    common prefix with `full` is used so that masking never covers tokens that differ.
    """
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], True) if i else []
        upto = full if i == len(messages) - 1 else _render(tokenizer, messages[: i + 1], False)
        start = _common_prefix(before, full)
        end = max(start, _common_prefix(upto, full))
        spans.append((start, end))
    return spans


def _encode_chat(
    messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase, train_on_prompt: bool
) -> tuple[list[int], list[int]]:
    full = _render(tokenizer, messages, False)
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    labels: list[int] = []

    def add(tokens: Sequence[int], trained: bool) -> None:
        ids.extend(tokens)
        labels.extend(tokens if trained or train_on_prompt else [IGNORE_INDEX] * len(tokens))

    cursor = 0
    for start, end in _assistant_spans(messages, tokenizer, full):
        add(full[cursor:start], False)
        answer = full[start:end]
        if eos is not None and eos in answer:
            # train up to and including the template's eos; what follows it ("\n") is format, not answer
            cut = len(answer) - answer[::-1].index(eos)
            add(answer[:cut], True)
            add(answer[cut:], False)
        else:
            # the template does not end turns with the tokenizer's eos: add it, or the model never stops
            add(answer, True)
            if eos is not None:
                add([eos], True)
        cursor = end
    add(full[cursor:], False)
    return ids, labels


def length_histogram(lengths: Sequence[int], max_seq_len: int) -> dict[str, int]:
    """Row counts per token-length bin (1-16, 17-32, ... doubling up to max_seq_len or the longest row)."""
    edges = [16]
    while edges[-1] < max(max_seq_len, max(lengths, default=1)):
        edges.append(edges[-1] * 2)
    buckets: dict[str, int] = {}
    lo = 1
    for hi in edges:
        buckets[f"{lo}-{hi}"] = sum(lo <= n <= hi for n in lengths)
        lo = hi + 1
    return buckets


def _report(
    examples: list[dict[str, list[int]]], dropped: list[tuple[int, str]], rows_in: int, truncated: int, max_seq_len: int
) -> DataReport:
    lengths = [len(e["input_ids"]) for e in examples]
    return DataReport(
        rows_in=rows_in,
        rows_kept=len(examples),
        dropped=dropped,
        n_tokens=sum(lengths),
        n_trainable_tokens=sum(sum(1 for x in e["labels"][1:] if x != IGNORE_INDEX) for e in examples),
        max_len=max(lengths, default=0),
        mean_len=sum(lengths) / len(lengths) if lengths else 0.0,
        length_histogram=length_histogram(lengths, max_seq_len),
        truncated=truncated,
    )



def chunk_corpus(
    texts: Iterable[str], tokenizer: PreTrainedTokenizerBase, block_size: int
) -> list[dict[str, list[int]]]:
    """Concatenate the texts (each followed by eos) and cut the stream into blocks of `block_size`.

    The standard recipe for pretraining from scratch: no padding is wasted and every block is a
    continuation task. Blocks may start mid-document and attend across the eos between two documents;
    that is the accepted trade-off of this recipe. The last, shorter block is kept when it has at least two
    tokens (one target). Labels equal input_ids.
    """
    if not isinstance(block_size, int) or block_size < 2:
        raise ConfigError("block_size", block_size, "a whole number of tokens, at least 2")
    stream: list[int] = []
    batch: list[str] = []
    for text in texts:
        if text and text.strip():
            batch.append(text)
        if len(batch) >= 1000:
            stream.extend(_encode_texts(batch, tokenizer))
            batch = []
    stream.extend(_encode_texts(batch, tokenizer))
    if not stream:
        raise DataError(key="error.data.corpus_empty")
    blocks = []
    for start in range(0, len(stream), block_size):
        block = stream[start : start + block_size]
        if len(block) >= 2:
            blocks.append({"input_ids": block, "labels": list(block), "attention_mask": [1] * len(block)})
    return blocks


def split_eval(examples: Sequence[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """Hold out about `fraction` of the examples for evaluation (at least one when fraction > 0 and
    there are two or more examples; the training part is never empty). Both parts keep the input order."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError("eval_fraction", fraction, "a fraction from 0 up to (not including) 1")
    n = len(examples)
    n_eval = round(n * fraction)
    if fraction > 0 and n >= 2:
        n_eval = min(max(1, n_eval), n - 1)
    else:
        n_eval = 0
    order = list(range(n))
    random.Random(seed).shuffle(order)
    held = set(order[:n_eval])
    train = [ex for i, ex in enumerate(examples) if i not in held]
    evals = [ex for i, ex in enumerate(examples) if i in held]
    return train, evals
