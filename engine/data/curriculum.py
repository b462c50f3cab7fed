"""Curriculum ordering: train on the samples in a chosen order instead of shuffled.

- ``short-to-long``: ascending token count (ties keep the data's order);
- ``column``: ascending by a numeric column of the data (``TrainConfig.difficulty_column``), e.g. a
  difficulty score. Normalization keeps only the columns of the detected format, so the column is read from
  the raw rows (`engine.data.files.read_rows`, or the Hub split) and matched to the examples by row number.

The Trainer must then not shuffle: engine/training/run.py sets `train_sampling_strategy="sequential"`
(transformers 5 `Trainer._get_train_sampler` returns a `SequentialSampler` for it). The order is a pure
function of the data, so a resumed run skips the same batches it already trained on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DataError, Phrase

if TYPE_CHECKING:
    from ..config import TrainConfig
    from .formats import RecordSet
    from .tokenize import DataReport


def _number(value: Any) -> float | None:
    """A finite float of a cell (numbers, or text holding a number as CSV cells do), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str) and value.strip():
        try:
            out = float(value.strip().replace(",", ".") if value.count(",") == 1 and "." not in value else value.strip())
        except ValueError:
            return None
    else:
        return None
    return out if math.isfinite(out) else None


def raw_column(cfg: TrainConfig, column: str) -> tuple[dict[int, Any], str, list[str]]:
    """``{row number: value}`` of one (lower-cased) column of the training data, the row unit, and the columns found."""
    from ..refs import check_hub_config, check_hub_ref, check_split, is_hub_ref
    from .files import read_rows
    from .hub import load_hub_rows

    if is_hub_ref(cfg.dataset):
        raw = load_hub_rows(check_hub_ref(cfg.dataset), check_hub_config(cfg.hub_config), check_split(cfg.hub_split))
        unit = "row"
    else:
        raw, unit, _ = read_rows(cfg.dataset)
    values: dict[int, Any] = {}
    found: dict[str, None] = {}
    for number, row in raw:
        if isinstance(row, dict):
            row = {str(k).strip().lower(): v for k, v in row.items()}
            found.update(dict.fromkeys(row))
            if column in row:
                values[number] = row[column]
    return values, unit, list(found)


def column_keys(cfg: TrainConfig, recordset: RecordSet, rows: Sequence[int]) -> list[float]:
    """The numeric `cfg.difficulty_column` value of each of `rows` (row numbers of the kept examples).

    Raises DataError naming the column when the data does not have it or a row holds no number.
    """
    column = cfg.difficulty_column
    values, unit, found = raw_column(cfg, column)
    where = recordset.summary().split(" from ", 1)[-1]
    if not values:
        shown = ", ".join(repr(c) for c in found[:20]) or "—"
        raise DataError(key="error.curriculum.no_column", where=where, column=column, found=shown)
    keys = []
    for number in rows:
        if number not in values:
            raise DataError(key="error.curriculum.no_value", where=where, column=column, row=number, unit=Phrase(f"text.unit.{unit}"))
        key = _number(values[number])
        if key is None:
            raise DataError(key="error.curriculum.not_number", where=where, column=column, row=number, unit=Phrase(f"text.unit.{unit}"),
                            value=str(values[number])[:80])
        keys.append(key)
    return keys


def kept_rows(recordset: RecordSet, report: DataReport) -> list[int]:
    """Row numbers of the examples `tokenize_records` kept, in example order."""
    dropped = {n for n, _ in report.dropped}
    return [n for n in recordset.rows if n not in dropped]


def curriculum_keys(
    cfg: TrainConfig, examples: Sequence[dict[str, list[int]]], recordset: RecordSet, report: DataReport
) -> list[float] | None:
    """A sort key per example (aligned with `examples`), or None without a curriculum."""
    if cfg.curriculum == "none":
        return None
    if cfg.curriculum == "short-to-long":
        return [float(len(e["input_ids"])) for e in examples]
    rows = kept_rows(recordset, report)
    if len(rows) != len(examples):  # cannot happen with tokenize_records; guard the alignment anyway
        raise DataError(key="error.curriculum.mismatch", examples=len(examples), rows=len(rows))
    return column_keys(cfg, recordset, rows)


def order(train: Sequence[Any], examples: Sequence[Any], keys: Sequence[float] | None) -> list[Any]:
    """`train` (a subset of `examples`, e.g. after holding out the eval set) sorted by the examples' keys.

    Stable: equal keys keep the data's order. Matching by object identity keeps the eval split independent
    of the curriculum (the same rows are held out with or without one).
    """
    if keys is None:
        return list(train)
    by_id = {id(e): k for e, k in zip(examples, keys, strict=True)}
    return sorted(train, key=lambda e: by_id[id(e)])


def check_applicable(cfg: TrainConfig, chunked: bool) -> None:
    """A curriculum needs separate samples; plain text is cut into equal blocks that mix rows."""
    if chunked and cfg.curriculum != "none":
        raise ConfigError(
            "curriculum", cfg.curriculum, allowed_key="visitor_error.curriculum_chunked", owner="TrainConfig",
        )
