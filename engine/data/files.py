"""Reading the rows of a dataset file: built-in samples, .jsonl/.json/.csv/.tsv/.txt/.parquet, with the checks a
person uploading a file needs to hear about (missing, empty, too big, binary, not UTF-8, a line too long, broken JSON).

Files are parsed here with the standard library rather than with `datasets.load_dataset`, because a person
uploading a file needs to hear *which line* is broken and *which columns* were found, and because parsing
a small upload must not write a cache folder. Rows come back as they are, every column included;
engine/data/formats.py detects their format and normalizes them. `read_text`, `parse_jsonl` and `parse_csv`
also read the prompt files of engine/inference/batch.py.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ..errors import DataError, Phrase
from ..refs import shown_file_name

SAMPLES_DIR = Path(__file__).resolve().parent / "samples"
BUILTIN_FILES: dict[str, str] = {
    "builtin:instructions": "instructions.jsonl",
    "builtin:dates": "dates.jsonl",
    "builtin:corpus": "corpus.txt",
    "builtin:preferences": "preferences.jsonl",
    "builtin:feedback": "feedback.jsonl",
}
BUILTIN_DATASETS: dict[str, str] = {
    "builtin:instructions": "194 short instruction/answer pairs in Portuguese and English (LLMs, GPUs, daily life).",
    "builtin:dates": "600 date conversions DD/MM/YYYY -> YYYY-MM-DD: the scored task (100 held-out test items).",
    "builtin:corpus": "~75 KB of plain paragraphs in Portuguese and English, for pretraining a compact model.",
    "builtin:preferences": "494 preference pairs (prompt, chosen, rejected) in Portuguese and English for DPO and ORPO: date answers "
    "with day and month swapped or the wrong format, instruction answers cut off or answering another question.",
    "builtin:feedback": "494 answers labelled good or bad (prompt, completion, label) for KTO: one answer of each preference pair, "
    "the shape of a chat app's thumbs-up/down export.",
}

EXTENSIONS: dict[str, str] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "txt",
    ".parquet": "parquet",
}
MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_LINE_BYTES = 10 * 1024 * 1024
# Rows and columns a file may have, checked before its rows are built (parquet: from its metadata; text formats: the
# parser stops at the cap). The same row cap as Hub datasets (engine/data/hub.py MAX_HUB_ROWS).
MAX_FILE_ROWS = 200_000
MAX_COLUMNS = 1_000
# Parquet stores repeated values once (dictionary encoding): a 17 KB file can hold gigabytes of rows.
MAX_PARQUET_BYTES = 1024 * 1024 * 1024


def _too_many_rows(name: str, n: int | None = None) -> DataError:
    """`n` rows (None: more than the cap, where the parser stopped)."""
    if n is None:
        return DataError(key="error.data.too_many_rows_more", file=name, max=MAX_FILE_ROWS)
    return DataError(key="error.data.too_many_rows", file=name, n=n, max=MAX_FILE_ROWS)


class BadRow(Exception):
    """A single row cannot be used; it is dropped and reported, the rest of the file goes on."""


def read_rows(source: str) -> tuple[list[tuple[int, Any]], str, str]:
    """The raw rows of a built-in sample or local file, before normalization: ``(rows, unit, file name)``.

    rows are ``(1-based position, value)`` pairs with every column the file has (normalization keeps only
    the columns of the detected format; engine/data/curriculum.py reads a difficulty column from here).
    """
    path = _resolve(source)
    name = display_name(source)
    kind = EXTENSIONS[path.suffix.lower()]
    if kind == "parquet":
        raw, unit = _read_parquet(path), "row"
    else:
        text = read_text(path, check_lines=kind != "json")
        if kind == "jsonl":
            raw, unit = parse_jsonl(text, name)
        elif kind == "json":
            raw, unit = _parse_json(text, name)
        elif kind == "csv":
            delimiter = "\t" if path.suffix.lower() == ".tsv" else None
            raw, unit = parse_csv(text, name, delimiter), "row"
        else:
            raw, unit = _parse_txt(text), "line"
    if not raw:
        raise DataError(key="error.data.no_rows", file=name)
    return raw, unit, name


def display_name(source: str) -> str:
    """How a source is named in messages: ``builtin:``/``hub:`` references as they are, files by their name (an
    upload's without the hash prefix it is kept under)."""
    return source if source.startswith(("builtin:", "hub:")) else shown_file_name(source)


def _resolve(source: str) -> Path:
    source = (source or "").strip()
    if not source:
        raise DataError(key="error.data.no_dataset")
    if source.startswith("builtin:"):
        if source not in BUILTIN_FILES:
            raise DataError(key="error.data.unknown_builtin", name=source, available=", ".join(BUILTIN_FILES))
        return SAMPLES_DIR / BUILTIN_FILES[source]
    path = Path(source)
    name = shown_file_name(path)
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        key = "error.data.file_type_excel" if suffix in (".xlsx", ".xls", ".ods") else "error.data.file_type" if suffix else "error.data.no_extension"
        raise DataError(key=key, file=name, suffix=suffix, allowed=", ".join(EXTENSIONS))
    if not path.exists():
        raise DataError(key="error.data.not_found", file=name)
    if not path.is_file():
        raise DataError(key="error.data.not_a_file", file=name)
    size = path.stat().st_size
    if size == 0:
        raise DataError(key="error.data.empty", file=name)
    if size > MAX_FILE_BYTES:
        raise DataError(key="error.data.too_big", file=name, mb=round(size / 2**20), limit=MAX_FILE_BYTES // 2**20)
    return path


def read_text(path: Path, *, check_lines: bool) -> str:
    """Bytes -> str with the checks a person needs to hear about: binary, encoding, huge lines."""
    data = path.read_bytes()
    name = shown_file_name(path)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(key="error.data.utf16", file=name)
    if b"\x00" in data[:65536]:
        raise DataError(key="error.data.binary", file=name, text_types=", ".join(e for e in EXTENSIONS if e != ".parquet"))
    # utf-8-sig when there is a byte-order mark (Excel and Notepad write one), otherwise strict utf-8
    encoding = "utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(key="error.data.not_utf8", file=name, byte=f"0x{data[err.start]:02x}", line=line) from None
    if not text.strip():
        raise DataError(key="error.data.whitespace", file=name)
    if check_lines:
        _check_line_lengths(data, name)
    return text


def _check_line_lengths(data: bytes, name: str) -> None:
    start, line = 0, 1
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if end - start > MAX_LINE_BYTES:
            raise DataError(key="error.data.long_line", file=name, line=line, mb=round((end - start) / 2**20, 1),
                            limit=MAX_LINE_BYTES // 2**20)
        start, line = end + 1, line + 1


def parse_jsonl(text: str, name: str, *, allow_array: bool = True) -> tuple[list[tuple[int, Any]], str]:
    if allow_array and text.lstrip().startswith("["):  # a JSON array saved as .jsonl: read it as one
        return _parse_json(text, name)
    """``(rows, "line")`` of JSON Lines text: one JSON value per non-empty line, numbered by line.

    A JSON array saved as .jsonl is read as one array (`allow_array`); an invalid line raises `DataError` naming it.
    """
    rows = []
    # split on "\n" only: str.splitlines() would also split inside JSON strings at U+2028 and friends
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if len(rows) >= MAX_FILE_ROWS:  # stop at the cap: nothing past it is parsed
            raise _too_many_rows(name)
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            raise DataError(key="error.data.jsonl_line", file=name, line=number, column=err.colno, why=err.msg) from None
        except RecursionError:
            raise DataError(key="error.data.json_deep", file=name, line=number) from None
    return rows, "line"


def _parse_json(text: str, name: str) -> tuple[list[tuple[int, Any]], str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # several values one after another: JSON Lines with a .json name
            return parse_jsonl(text, name, allow_array=False)
        raise DataError(key="error.data.json_invalid", file=name, line=err.lineno, column=err.colno, why=err.msg) from None
    except RecursionError:
        raise DataError(key="error.data.json_deep", file=name, line=1) from None
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if isinstance(data.get("data"), list):
            data = data["data"]
        elif len(lists) == 1:
            data = next(iter(lists.values()))
        else:
            raise DataError(key="error.data.json_object", file=name, keys=", ".join(map(repr, list(data)[:10])))
    if not isinstance(data, list):
        raise DataError(key="error.data.json_not_list", file=name, found=_json_kind(data))
    if len(data) > MAX_FILE_ROWS:
        raise _too_many_rows(name, len(data))
    return list(enumerate(data, start=1)), "item"


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (a person's file never holds a Python `dict` or `str`)."""
    names = {dict: "object", list: "array", str: "string", bool: "true/false", type(None): "null", int: "number", float: "number"}
    return names.get(type(value), "value")


def parse_csv(text: str, name: str, delimiter: str | None = None) -> list[tuple[int, Any]]:
    """The rows of CSV text with a header line, as ``(row number, {column: cell})``.

    The delimiter is guessed from the header when not given; empty rows are skipped and a row with more cells than
    the header has columns becomes a `BadRow` (dropped and reported by the caller).
    """
    delimiter = delimiter or _guess_delimiter(text)
    csv.field_size_limit(MAX_LINE_BYTES)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    if not reader.fieldnames or not any((f or "").strip() for f in reader.fieldnames):
        raise DataError(key="error.data.csv_header", file=name)
    width = len(reader.fieldnames)
    if width > MAX_COLUMNS:
        raise DataError(key="error.data.too_many_columns", file=name, n=width, max=MAX_COLUMNS)
    rows: list[tuple[int, Any]] = []
    try:
        for number, row in enumerate(reader, start=1):
            if len(rows) >= MAX_FILE_ROWS:  # stop at the cap: nothing past it is parsed
                raise _too_many_rows(name)
            if None in row:  # more cells than header columns: a stray delimiter or an unquoted field
                rows.append((number, BadRow(Phrase("text.row.cells", cells=width + len(row[None]), columns=width))))
            elif any(v not in (None, "") for v in row.values()):
                rows.append((number, row))
    except csv.Error as err:
        raise DataError(key="error.data.csv_malformed", file=name, line=reader.line_num, why=str(err)) from None
    return rows


def _guess_delimiter(text: str) -> str:
    """The most frequent of , ; tab | in the header line (Excel in Portuguese locales writes ';').

    The header is used rather than csv.Sniffer on the whole sample, which is easily fooled by
    punctuation inside long text cells.
    """
    header = text.lstrip("\ufeff").split("\n", 1)[0]
    counts = {d: header.count(d) for d in (",", ";", "\t", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _parse_txt(text: str) -> list[tuple[int, Any]]:
    """One row per paragraph (blocks separated by blank lines); the row number is its first line."""
    rows: list[tuple[int, Any]] = []
    block: list[str] = []
    start = 1
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            rows.append((start, {"text": "\n".join(block).strip()}))
            block = []
    if block:
        rows.append((start, {"text": "\n".join(block).strip()}))
    return rows


def _read_parquet(path: Path) -> list[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow comes with datasets
        raise DataError(key="error.data.needs_pyarrow") from None
    name = shown_file_name(path)
    try:
        pfile = pq.ParquetFile(path)
        meta = pfile.metadata
    except Exception as err:  # pyarrow raises several unrelated types for a corrupt file
        raise DataError(key="error.data.parquet_unreadable", file=name, kind=type(err).__name__) from None
    # Sized from the file's metadata before any row is read: rows, columns and the uncompressed bytes.
    if meta.num_columns > MAX_COLUMNS:
        raise DataError(key="error.data.too_many_columns", file=name, n=meta.num_columns, max=MAX_COLUMNS)
    if meta.num_rows > MAX_FILE_ROWS:
        raise _too_many_rows(name, meta.num_rows)
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if unpacked > MAX_PARQUET_BYTES:
        raise DataError(key="error.data.parquet_unpacked", file=name, gib=round(unpacked / 2**30, 1), limit=MAX_PARQUET_BYTES // 2**30)
    rows: list[tuple[int, Any]] = []
    try:
        for batch in pfile.iter_batches(batch_size=4096):
            rows.extend(enumerate(batch.to_pylist(), start=len(rows) + 1))
            if len(rows) > MAX_FILE_ROWS:  # metadata can lie: stop at the cap all the same
                raise _too_many_rows(name)
    except DataError:
        raise
    except Exception as err:  # noqa: BLE001 - a corrupt page: a message, never a traceback
        raise DataError(key="error.data.parquet_row", file=name, row=len(rows) + 1, kind=type(err).__name__) from None
    return rows
