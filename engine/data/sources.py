"""Where a run's rows come from: Hub datasets, a column mapping, and a separate eval set.

engine/data/records.py reads local files and built-in samples; this module adds, on top of it:

- ``hub:owner/name`` references loaded with `datasets.load_dataset` (config name + split, slicing such as
  ``train[:2000]``), cached in the usual Hugging Face cache, never with remote code; every failure
  (offline, unknown or gated dataset, a loading script, a bad config or split) becomes a `DataError`
  that says what to do;
- the ``columns`` mapping (``instruction=question, output=answer``) applied before format detection, so
  that any table can be used without editing it;
- the records and examples of a TrainConfig (`train_records`, `eval_records`, `eval_examples`), used by
  the training run and by the data preview alike, so both see exactly the same rows.

Rows from every source go through the same normalization as files (`engine.data.records._normalize`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import DataError
from ..refs import COLUMN_TARGETS, check_hub_config, check_hub_ref, check_split, is_hub_ref, parse_columns
from . import records as data

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..config import TrainConfig

# A whole split is converted to Python rows; beyond this a slice is the sensible thing to ask for.
MAX_HUB_ROWS = 200_000
# Common column names of public datasets, to suggest a mapping when detection finds nothing.
_GUESSES: dict[str, tuple[str, ...]] = {
    "instruction": ("question", "query", "instruction", "task", "pergunta", "problem", "prompt", "input"),
    "input": ("context", "input", "contexto"),
    "output": ("answer", "response", "output", "resposta", "solution", "target", "completion"),
    "text": ("body", "content", "document", "passage", "sentence", "article", "texto", "story"),
    "messages": ("conversation", "conversations", "dialog", "dialogue", "chat", "turns", "messages"),
}


class MappedColumnsMissing(DataError):
    """The column mapping names source columns the data does not have."""


# --------------------------------------------------------------------------------------------------
# Column mapping (called by engine.data.records._normalize before format detection)
# --------------------------------------------------------------------------------------------------


def apply_columns(
    rows: list[tuple[int, dict[str, Any]]], mapping: dict[str, str], found: list[str], name: str
) -> tuple[list[tuple[int, dict[str, Any]]], data.Format]:
    """Rename the mapped columns of (lower-cased) rows; returns the rows and the format the targets name.

    A mapped source column replaces a column of the target's name; unmapped columns are kept (so an
    'input' column still joins 'instruction=question, output=answer'). Raises `DataError` naming the
    source columns that no row has, with the columns found.
    """
    missing = [s for s in mapping.values() if s not in found]
    if missing:
        raise MappedColumnsMissing(
            f"{name}: the column mapping names {', '.join(map(repr, missing))}, which "
            f"{'is not a column' if len(missing) == 1 else 'are not columns'} of this data. "
            f"Columns found: {_listing(found)}."
        )
    sources = set(mapping.values())
    out = []
    for number, row in rows:
        new = {k: v for k, v in row.items() if k not in sources}
        for target, source in mapping.items():
            if source in row:
                new[target] = row[source]
        out.append((number, new))
    fmt = COLUMN_TARGETS[next(iter(mapping))]
    sample = [row for _, row in out[:500]]
    if not any(all(k in row for k in keys) for row in sample for keys in data.FORMAT_KEYS[fmt]):
        need = " or ".join(" + ".join(keys) for keys in data.FORMAT_KEYS[fmt])
        raise DataError(
            f"{name}: the column mapping makes {fmt} data, which needs {need}, but the mapped rows have "
            f"{_listing(sorted({k for row in sample for k in row}))}. Map the missing target too, e.g. {suggest_mapping(found)!r}."
        )
    return out, fmt


def no_format_message(name: str, columns: list[str]) -> str:
    """The error when no format is recognized: the columns found and a mapping to type, with their names."""
    return (
        f"{name}: no recognizable columns. Found: {_listing(columns) or 'none'}. Expected one of: {data.EXPECTED_COLUMNS}. "
        f"Or map your columns in 'Column mapping' (--columns), e.g. {suggest_mapping(columns)!r}."
    )


def ambiguity_note(rows: list[dict[str, Any]], chosen: str) -> str | None:
    """A note when the columns fit several formats (the most structured one was used)."""
    fits = [fmt for fmt, alts in data.FORMAT_KEYS.items() if any(all(k in r for k in keys) for r in rows[:500] for keys in alts)]
    if len(fits) < 2:
        return None
    other = next(f for f in fits if f != chosen)
    example = {"text": "text=text", "instruction": "instruction=instruction, output=output", "prompt_completion": "prompt=prompt, completion=completion",
               "chat": "messages=messages"}[other]
    return (f"The columns fit several formats ({', '.join(fits)}); {chosen} was used. "
            f"To use another, set the column mapping, e.g. {example!r}.")


def suggest_mapping(columns: list[str]) -> str:
    """A column mapping built from common column names (question/answer, body, conversation...), or a
    template using the first columns of the data."""

    def pick(target: str, taken: set[str]) -> str | None:
        return next((c for g in _GUESSES[target] for c in columns if c == g and c not in taken), None)

    instruction = pick("instruction", set())
    output = pick("output", {instruction} if instruction else set())
    if instruction and output:
        extra = pick("input", {instruction, output})
        return f"instruction={instruction}, " + (f"input={extra}, " if extra else "") + f"output={output}"
    for target in ("messages", "text"):
        found = pick(target, set())
        if found:
            return f"{target}={found}"
    if len(columns) >= 2:
        return f"instruction={columns[0]}, output={columns[1]}"
    return f"text={columns[0]}" if columns else "text=COLUMN"


def _listing(columns: list[str]) -> str:
    shown = ", ".join(repr(c) for c in columns[:20])
    return shown + (f" and {len(columns) - 20} more" if len(columns) > 20 else "")


# --------------------------------------------------------------------------------------------------
# Hub datasets
# --------------------------------------------------------------------------------------------------


def load_hub_rows(name: str, config: str = "", split: str = "train") -> list[tuple[int, Any]]:
    """Rows of a Hub dataset split as (1-based position, dict) pairs, via `datasets.load_dataset`.

    Downloads once into the Hugging Face cache (HF_HOME / HF_DATASETS_CACHE) and reuses it, offline too.
    Loading scripts are never run (datasets 5 refuses them anyway; `trust_remote_code` is not passed).
    """
    if os.path.exists(name):  # load_dataset would read a local folder of that name instead of the Hub
        raise DataError(f"hub:{name}: a local folder has that name; Hub references must name a dataset on the Hub. Upload files through the form instead.")
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core requirement
        raise DataError("Loading Hub datasets needs the 'datasets' package. Upload the data as a file instead.") from None
    where = f"hub:{name}" + (f" (config {config!r})" if config else "") + f" split {split!r}"
    try:
        ds = datasets.load_dataset(name, config or None, split=split)
    except Exception as err:  # every failure becomes a message; the kinds below get specific advice
        raise DataError(_hub_error(name, where, err)) from None
    if isinstance(ds, dict):  # a DatasetDict (not expected with a split given)
        raise DataError(f"{where}: expected one split, got {', '.join(ds)}. Set the split, e.g. train.")
    n = len(ds)
    if n == 0:
        raise DataError(f"{where} has no rows. Check the split (and its slice).")
    if n > MAX_HUB_ROWS:
        base = split.split("[", 1)[0]
        raise DataError(
            f"{where} has {n:,} rows; at most {MAX_HUB_ROWS:,} are loaded for training here. "
            f"Take a slice with the split, e.g. {base}[:20000] (a few thousand rows are plenty for a LoRA fine-tune)."
        )
    return list(enumerate(ds.to_list(), start=1))


def _hub_error(name: str, where: str, err: Exception) -> str:
    from datasets.exceptions import DataFilesNotFoundError, DatasetNotFoundError

    text = str(err).split("\n", 1)[0]
    upload = "Or download the data and upload it as a file (.jsonl, .csv, .parquet...)."
    if isinstance(err, ConnectionError) or "offline" in text.lower():
        return (f"Cannot load {where}: the Hugging Face Hub is not reachable (offline, or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set) "
                f"and the dataset is not in the local cache. Connect to the internet and try again, or upload the data as a file "
                f"(.jsonl, .csv, .parquet...) or pick a built-in sample.")
    if isinstance(err, DatasetNotFoundError):
        if "gated" in text:
            return (f"Cannot load {where}: it is a gated dataset. Accept its terms on https://huggingface.co/datasets/{name} and log in "
                    f"(set HF_TOKEN, or `hf auth login`), then try again. {upload}")
        return (f"Cannot load {where}: no such dataset on the Hub, or it is private. Check the name (owner/name, as in "
                f"https://huggingface.co/datasets/OWNER/NAME); for a private dataset log in (HF_TOKEN). {upload}")
    if isinstance(err, DataFilesNotFoundError):
        return f"Cannot load {where}: the repository has no data files that can be read (csv, json, parquet...). {upload}"
    if "scripts are no longer supported" in text or "trust_remote_code" in text:
        return (f"Cannot load {where}: it needs a loading script (remote code), which is never run here. Look on the Hub for a "
                f"Parquet version of it, or another copy of the data. {upload}")
    if "BuilderConfig" in text or "Config name is missing" in text or ("config" in text.lower() and "available" in text.lower()):
        return f"Cannot load {where}: {text} Set 'Hub config' to one of the available configurations."
    if "split" in text.lower():
        return f"Cannot load {where}: {text} Set 'Hub split' to one of the splits (slicing such as train[:2000] is allowed)."
    return f"Cannot load {where} ({type(err).__name__}: {text}). {upload}"


# --------------------------------------------------------------------------------------------------
# Any source, and the sources of a TrainConfig
# --------------------------------------------------------------------------------------------------


def load_source(source: str, *, columns: str | dict[str, str] | None = "", hub_config: str = "", hub_split: str = "train") -> data.RecordSet:
    """Records of a built-in sample, a local file or a ``hub:owner/name`` dataset, after the column mapping."""
    mapping = parse_columns(columns)
    source = (source or "").strip()
    if is_hub_ref(source):
        name = check_hub_ref(source)
        split = check_split(hub_split)
        raw = load_hub_rows(name, check_hub_config(hub_config), split)
        label = f"hub:{name}[{split}]" if "[" not in split else f"hub:{name} {split}"
        return data._normalize(raw, "row", source, label, mapping)
    return data.load_records(source, columns=mapping)


def train_records(cfg: TrainConfig) -> data.RecordSet:
    """The training records of a config: its dataset, Hub config/split and column mapping."""
    return load_source(cfg.dataset, columns=cfg.columns, hub_config=cfg.hub_config, hub_split=cfg.hub_split)


def eval_records(cfg: TrainConfig) -> data.RecordSet | None:
    """The records of `cfg.eval_dataset` (Hub config shared, split `eval_split`), or None.

    The column mapping is applied when the eval data has its source columns; an eval set already in a
    recognized format (a built-in sample, a standard file) is read as it is.
    """
    if not cfg.eval_dataset:
        return None
    try:
        return load_source(cfg.eval_dataset, columns=cfg.columns, hub_config=cfg.hub_config, hub_split=cfg.eval_split)
    except MappedColumnsMissing:
        return load_source(cfg.eval_dataset, hub_config=cfg.hub_config, hub_split=cfg.eval_split)


def eval_examples(cfg: TrainConfig, tokenizer: PreTrainedTokenizerBase, max_len: int, *, chunked: bool) -> tuple[list[dict[str, list[int]]], dict[str, Any]]:
    """Eval examples from `cfg.eval_dataset`, prepared the way the training examples are.

    chunked: the training data is cut into blocks (from scratch / plain text), so the eval text is too;
    otherwise the eval rows are tokenized with the same masking and long-row handling.
    """
    records = eval_records(cfg)
    if records is None:
        return [], {}
    if chunked:
        blocks = data.chunk_corpus(data.record_texts(records), tokenizer, max_len)
        return blocks, {"eval_source": records.summary(), "eval_blocks": len(blocks)}
    tok = data.tokenize_records(records, tokenizer, max_len, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    return tok.examples, {"eval_source": records.summary(), "eval_report": tok.report.summary()}
