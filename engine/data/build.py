"""A run's data, from its TrainConfig: which rows (`train_records`, `eval_records`) and the examples the Trainer
gets (`build_train_data`).

The training run (engine/training/run.py), the data check before a run (engine/training/data_check.py) and
bench/train_throughput.py all read the data through here, so they see exactly the same rows: a built-in sample, a
local file or a ``hub:owner/name`` dataset, after the column mapping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DataError, EngineError
from ..refs import check_hub_config, check_hub_ref, check_split, is_hub_ref, parse_columns
from . import curriculum
from .files import display_name
from .formats import MappedColumnsMissing, RecordSet, load_records, normalize, record_texts
from .hub import load_hub_rows
from .packing import mark_for_packing, plan_packing
from .tokenize import chunk_corpus, split_eval, tokenize_records

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..config import TrainConfig

@dataclass
class TrainData:
    """The examples of a run: `train` (curriculum-ordered and marked for packing as configured) and `evals` (never packed),
    with the `report` the `data` event shows (tokenization counts, blocks, eval source, packing)."""

    train: list[dict[str, list[int]]]
    evals: list[dict[str, list[int]]]
    report: dict[str, Any]

    def event_fields(self) -> dict[str, Any]:
        """The fields of the run's `data` event: the report, with the dropped rows counted rather than listed."""
        fields = {k: v for k, v in self.report.items() if k != "dropped"}
        return {**fields, "dropped": len(self.report.get("dropped", []) or [])}


def load_source(source: str, *, columns: str | dict[str, str] | None = "", hub_config: str = "", hub_split: str = "train") -> RecordSet:
    """Records of a built-in sample, a local file or a ``hub:owner/name`` dataset, after the column mapping."""
    mapping = parse_columns(columns)
    source = (source or "").strip()
    if is_hub_ref(source):
        name = check_hub_ref(source)
        split = check_split(hub_split)
        raw = load_hub_rows(name, check_hub_config(hub_config), split)
        label = f"hub:{name}[{split}]" if "[" not in split else f"hub:{name} {split}"
        return normalize(raw, "row", source, label, mapping)
    return load_records(source, columns=mapping)


def train_records(cfg: TrainConfig) -> RecordSet:
    """The training records of a config: its dataset, Hub config/split and column mapping. Answers labelled good or
    bad (the `unpaired` format) are refused for every method but KTO: the others would learn the bad answers too."""
    records = load_source(cfg.dataset, columns=cfg.columns, hub_config=cfg.hub_config, hub_split=cfg.hub_split)
    check_labels_used(records, cfg)
    if cfg.curriculum == "column" and cfg.difficulty_column:  # the curriculum reads that column: not an unused one
        records.notes = [_without(n, cfg.difficulty_column) for n in records.notes]
        records.notes = [n for n in records.notes if n is not None]
    return records


def _without(note: Any, column: str) -> Any:
    """An unused-columns note (engine/data/formats.py `unused_note`) without `column`; None when nothing is left."""
    if not str(getattr(note, "key", "")).startswith("text.note.unused"):
        return note
    left = [c for c in note.params["columns"].split(", ") if c != repr(column)]
    if not left:
        return None
    return type(note)(note.key, **{**note.params, "columns": ", ".join(left)})


def check_labels_used(records: RecordSet, cfg: TrainConfig | None = None, *, cfg_method: str = "") -> None:
    """`DataError` naming the label column and offering KTO when `records` are labelled completions and the method
    (`cfg`'s, or `cfg_method`) is not KTO (a per-row label never goes unused)."""
    method = cfg.method if cfg is not None else cfg_method
    if records.format == "unpaired" and method != "kto":
        noted = next((n.params["column"] for n in records.notes if getattr(n, "key", "") == "text.note.label_column"), "label")
        column = parse_columns(cfg.columns).get("label", noted) if cfg is not None else noted
        raise DataError(key="error.data.labelled_needs_kto", file=display_name(records.source), column=column, method=method)


def eval_records(cfg: TrainConfig) -> RecordSet | None:
    """The records of `cfg.eval_dataset` (Hub config shared, split `eval_split`), or None.

    The column mapping is applied when the eval data has its source columns; an eval set already in a
    recognized format (a built-in sample, a standard file) is read as it is.
    """
    if not cfg.eval_dataset:
        return None
    try:
        records = load_source(cfg.eval_dataset, columns=cfg.columns, hub_config=cfg.hub_config, hub_split=cfg.eval_split)
    except MappedColumnsMissing:
        records = load_source(cfg.eval_dataset, hub_config=cfg.hub_config, hub_split=cfg.eval_split)
    check_labels_used(records, cfg)
    return records


def build_train_data(cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase, max_len: int, *, pack: bool = False,
                     row_multiple: int = 8) -> TrainData:
    """The train and eval examples of `cfg`, tokenized with `tokenizer` (ready for chat: engine/data/tokenize.py).

    Plain text and training from scratch are cut into blocks of `max_len`; other formats are tokenized with prompt
    masking and the config's long-row handling. A separate eval set replaces the held-out fraction. pack: packing
    is on and the model keeps packed samples apart (engine/data/packing.py `supports_packing`).
    """
    recordset = train_records(cfg)  # file, built-in or hub:..., after the column mapping
    chunked = cfg.method == "scratch" or recordset.format == "text"
    tok = None
    if chunked:
        texts = record_texts(recordset)
        examples = chunk_corpus(texts, tokenizer, max_len)
        report = {"rows_in": len(recordset.records), "blocks": len(examples), "block_size": max_len}
    else:
        tok = tokenize_records(recordset, tokenizer, max_len, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
        examples = tok.examples
        report = dataclasses.asdict(tok.report) if dataclasses.is_dataclass(tok.report) else dict(tok.report)
    if not examples:
        raise EngineError(key="error.data.all_dropped", dataset=display_name(cfg.dataset))
    if cfg.eval_dataset:  # a separate eval set replaces the held-out fraction
        evals, eval_info = _eval_examples(cfg, tokenizer, max_len, chunked=chunked)
        train = examples
        report.update(eval_info)
    else:
        train, evals = split_eval(examples, cfg.eval_fraction, cfg.seed) if cfg.eval_fraction > 0 and len(examples) >= 10 else (examples, [])
    report.update({"train_examples": len(train), "eval_examples": len(evals)})
    # curriculum order and packing (arrange_train below); the eval set stays unpacked, its loss comparable across runs
    train, arranged = arrange_train(cfg, train, examples=examples, recordset=recordset, report=tok.report if tok else None,
                                    max_len=max_len, chunked=chunked, pack=pack, row_multiple=row_multiple)
    report.update(arranged)
    return TrainData(train, evals, report)


def _eval_examples(cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase, max_len: int, *, chunked: bool) -> tuple[list[dict[str, list[int]]], dict[str, Any]]:
    """Eval examples from `cfg.eval_dataset`, prepared the way the training examples are.

    chunked: the training data is cut into blocks (from scratch / plain text), so the eval text is too;
    otherwise the eval rows are tokenized with the same masking and long-row handling.
    """
    records = eval_records(cfg)
    if records is None:
        return [], {}
    if chunked:
        blocks = chunk_corpus(record_texts(records), tokenizer, max_len)
        return blocks, {"eval_source": records.summary(), "eval_blocks": len(blocks)}
    tok = tokenize_records(records, tokenizer, max_len, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    return tok.examples, {"eval_source": records.summary(), "eval_report": tok.report.summary()}


def arrange_train(
    cfg: Any,
    train: list[dict[str, list[int]]],
    *,
    examples: Sequence[dict[str, list[int]]],
    recordset: Any,
    report: Any,
    max_len: int,
    chunked: bool,
    pack: bool,
    row_multiple: int = 8,
) -> tuple[list[dict[str, list[int]]], dict[str, Any]]:
    """The training rows of a run and what to report about them.

    train: the examples left after holding out the eval set (a subset of `examples`, same objects).
    report: the tokenization report (row numbers of dropped rows, for the difficulty column).
    pack: packing is on and the model honours packed positions (`supports_packing`). Blocks of plain text
    (`chunked`) are already full rows and are never packed. row_multiple: the width step of packed rows
    (engine/data/packing.py `packed_row_multiple`), for the report's token counts.
    """
    curriculum.check_applicable(cfg, chunked)
    info: dict[str, Any] = {}
    if not chunked and cfg.curriculum != "none":
        train = curriculum.order(train, examples, curriculum.curriculum_keys(cfg, examples, recordset, report))
        info["curriculum"] = cfg.curriculum
    if pack and not chunked:  # the collator packs each micro-batch's samples (engine/data/packing.py)
        info.update(plan_packing([len(e["input_ids"]) for e in train], max_len, cfg.micro_batch_size, seed=cfg.seed,
                                 shuffle=cfg.curriculum == "none", multiple=row_multiple).as_event())
        train = mark_for_packing(train, max_len)
    return train, info
