"""Tests of engine/data/files.py: the built-in samples, reading jsonl/json/csv/tsv/txt/parquet, and malformed input
(a DataError naming the problem)."""

from __future__ import annotations

import json

import pytest
from conftest import INSTRUCTION, write_csv, write_jsonl

from engine.data import files
from engine.data.formats import load_records
from engine.errors import DataError


def test_builtin_samples_load():
    corpus = load_records("builtin:corpus")
    assert corpus.format == "text" and len(corpus) > 250 and not corpus.dropped
    assert 60_000 <= (files.SAMPLES_DIR / "corpus.txt").stat().st_size <= 100_000
    instructions = load_records("builtin:instructions")
    assert instructions.format == "instruction" and len(instructions) >= 150 and not instructions.dropped
    dates = load_records("builtin:dates")
    assert dates.format == "instruction" and len(dates) == 600
    assert set(files.BUILTIN_DATASETS) == set(files.BUILTIN_FILES)


def test_builtin_unknown_name():
    with pytest.raises(DataError, match="builtin:corpus"):
        load_records("builtin:nope")


def test_csv_with_semicolons_and_quotes(tmp_path):
    path = write_csv(tmp_path / "d.csv", ["instruction", "output"], [["Diga; oi", "Oi, tudo bem?"]], delimiter=";")
    rs = load_records(str(path))
    assert rs.format == "instruction" and rs.unit == "row"
    assert rs.records == [{"instruction": "Diga; oi", "input": "", "output": "Oi, tudo bem?"}]


def test_csv_with_bom_and_capitalized_headers(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffPrompt,Completion\nQuanto é 2+2?,4\n".encode())
    rs = load_records(str(path))
    assert rs.format == "prompt_completion" and rs.records == [{"prompt": "Quanto é 2+2?", "completion": "4"}]


def test_json_list_and_data_wrapper(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([INSTRUCTION]), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps({"data": [INSTRUCTION, INSTRUCTION]}), encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps(["primeiro texto", "segundo texto"]), encoding="utf-8")
    assert load_records(str(tmp_path / "a.json")).records == [INSTRUCTION]
    b = load_records(str(tmp_path / "b.json"))
    assert len(b) == 2 and b.unit == "item"
    c = load_records(str(tmp_path / "c.json"))
    assert c.format == "text" and [r["text"] for r in c.records] == ["primeiro texto", "segundo texto"]


def test_json_lines_with_json_extension_and_array_with_jsonl_extension(tmp_path):
    write_jsonl(tmp_path / "lines.json", [INSTRUCTION, INSTRUCTION])
    (tmp_path / "array.jsonl").write_text(json.dumps([INSTRUCTION], indent=2), encoding="utf-8")
    assert len(load_records(str(tmp_path / "lines.json"))) == 2
    assert load_records(str(tmp_path / "array.jsonl")).records == [INSTRUCTION]


def test_jsonl_keeps_unicode_line_separators_inside_strings(tmp_path):
    text = "linha\u2028separada\u0085e \x0cfim"
    rs = load_records(str(write_jsonl(tmp_path / "u.jsonl", [{"text": text}, {"text": "dois"}])))
    assert [r["text"] for r in rs.records] == [text, "dois"] and rs.rows == [1, 2]


def test_tsv(tmp_path):
    path = write_csv(tmp_path / "d.tsv", ["text"], [["um, dois; três"], ["quatro"]], delimiter="\t")
    assert [r["text"] for r in load_records(str(path)).records] == ["um, dois; três", "quatro"]


def test_txt_paragraphs(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("Primeiro parágrafo,\nduas linhas.\n\n\nSegundo.\n   \nTerceiro.\n", encoding="utf-8")
    rs = load_records(str(path))
    assert rs.format == "text"
    assert [r["text"] for r in rs.records] == ["Primeiro parágrafo,\nduas linhas.", "Segundo.", "Terceiro."]
    assert rs.rows == [1, 5, 7]


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([INSTRUCTION, {**INSTRUCTION, "input": None}]), tmp_path / "d.parquet")
    rs = load_records(str(tmp_path / "d.parquet"))
    assert rs.format == "instruction" and len(rs) == 2 and rs.records[1]["input"] == ""


def test_empty_file(tmp_path):
    (tmp_path / "e.jsonl").write_bytes(b"")
    (tmp_path / "w.jsonl").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match="empty"):
        load_records(str(tmp_path / "e.jsonl"))
    with pytest.raises(DataError, match="empty"):
        load_records(str(tmp_path / "w.jsonl"))


@pytest.mark.parametrize("name,hint", [("data.xlsx", "CSV UTF-8"), ("notes.docx", ".jsonl"), ("noext", "no extension")])
def test_wrong_extension(tmp_path, name, hint):
    (tmp_path / name).write_text("x", encoding="utf-8")
    with pytest.raises(DataError, match="unsupported file type") as err:
        load_records(str(tmp_path / name))
    assert hint in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_records(str(tmp_path / "gone.jsonl"))


def test_invalid_json_on_line_3(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(
        json.dumps(INSTRUCTION) + "\n" + json.dumps(INSTRUCTION) + '\n{"instruction": "x", "output": \n',
        encoding="utf-8",
    )
    with pytest.raises(DataError, match=r"broken\.jsonl: line 3 is not valid JSON"):
        load_records(str(path))


def test_invalid_json_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"text": "a"},\n  {"text": "b",}\n]', encoding="utf-8")
    with pytest.raises(DataError, match="line 3"):
        load_records(str(path))


def test_binary_file(tmp_path):
    path = tmp_path / "model.jsonl"
    path.write_bytes(b"PK\x03\x04\x00\x00binary\x00\xff\xfe" * 10)
    with pytest.raises(DataError, match="binary"):
        load_records(str(path))


def test_latin1_file(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("instruction,output\nDiga oi,Olá\nDiga tchau,Até já\n".encode("latin-1"))
    with pytest.raises(DataError) as err:
        load_records(str(path))
    message = str(err.value)
    assert "not UTF-8" in message and "line 2" in message and "Latin-1" in message


def test_utf16_file(tmp_path):
    path = tmp_path / "u16.txt"
    path.write_bytes("olá mundo".encode("utf-16"))
    with pytest.raises(DataError, match="UTF-16"):
        load_records(str(path))


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(INSTRUCTION).encode() + b"\n")
    assert load_records(str(path)).records == [INSTRUCTION]


def test_file_too_big(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1000)
    path = write_jsonl(tmp_path / "big.jsonl", [INSTRUCTION] * 50)
    with pytest.raises(DataError, match="limit is"):
        load_records(str(path))


def test_line_too_long(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 200)
    path = write_jsonl(tmp_path / "long.jsonl", [INSTRUCTION, {"text": "x" * 500}])
    with pytest.raises(DataError, match="line 2 is"):
        load_records(str(path))


def test_csv_without_header(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError):
        load_records(str(path))


def test_csv_row_with_extra_cells_is_dropped(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("instruction,output\nok,ok\na,b,c\n", encoding="utf-8")
    rs = load_records(str(path))
    assert len(rs) == 1 and rs.dropped == [(2, "3 cells for 2 columns")]
