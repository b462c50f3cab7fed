"""Tests of engine/data/formats.py: format detection, normalization (bad rows dropped and reported), missing columns,
chat messages, and the column mapping."""

from __future__ import annotations

import pytest
from conftest import CHAT, INSTRUCTION, write_csv, write_jsonl

from engine.data.build import load_source
from engine.data.formats import load_records, suggest_mapping, to_messages
from engine.errors import DataError


def test_detect_text_jsonl(tmp_path):
    rs = load_records(str(write_jsonl(tmp_path / "t.jsonl", [{"text": "um"}, {"text": "dois"}])))
    assert rs.format == "text" and rs.records == [{"text": "um"}, {"text": "dois"}]
    assert rs.rows == [1, 2] and rs.unit == "line"


def test_detect_instruction_with_response_alias(tmp_path):
    rows = [{"instruction": "Diga oi.", "response": "Oi!"}, {"Instruction": "Say hi.", "Input": "", "Output": "Hi!"}]
    rs = load_records(str(write_jsonl(tmp_path / "i.jsonl", rows)))
    assert rs.format == "instruction"
    assert rs.records == [
        {"instruction": "Diga oi.", "input": "", "output": "Oi!"},
        {"instruction": "Say hi.", "input": "", "output": "Hi!"},
    ]


def test_detect_prompt_completion(tmp_path):
    rs = load_records(str(write_jsonl(tmp_path / "p.jsonl", [{"prompt": "2+2=", "completion": "4"}])))
    assert rs.format == "prompt_completion"
    assert to_messages(rs.records[0], rs.format) == [
        {"role": "user", "content": "2+2="},
        {"role": "assistant", "content": "4"},
    ]


def test_detect_messages(tmp_path):
    conv = [
        {"role": "system", "content": "Seja breve."},
        {"role": "user", "content": "Oi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Olá!"}]},  # gradio-style parts
    ]
    rs = load_records(str(write_jsonl(tmp_path / "m.jsonl", [{"messages": conv}])))
    assert rs.format == "chat"
    assert rs.records[0]["messages"][-1] == {"role": "assistant", "content": "Olá!"}


def test_detect_sharegpt_conversations(tmp_path):
    conv = [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "Hi"},
        {"from": "gpt", "value": "Hello!"},
        {"from": "human", "value": "Unanswered question"},  # trailing user turn: nothing to learn, trimmed
    ]
    rs = load_records(str(write_jsonl(tmp_path / "c.jsonl", [{"conversations": conv}])))
    assert rs.format == "chat"
    assert rs.records[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
    ]


def test_bad_rows_are_dropped_and_reported(tmp_path):
    rows = [
        INSTRUCTION,
        {"instruction": "Sem resposta", "output": "  "},
        {"output": "sem instrução", "instruction": None},
        {"instruction": "lista", "output": ["não", "é", "texto"]},
        "not an object but a string",
        {"instruction": "ok", "output": "ok"},
    ]
    rs = load_records(str(write_jsonl(tmp_path / "bad.jsonl", rows)))
    assert len(rs) == 2 and rs.rows == [1, 6]
    assert [n for n, _ in rs.dropped] == [2, 3, 4, 5]
    reasons = dict(rs.dropped)
    assert reasons[2] == "empty 'output'" and reasons[3] == "empty 'instruction'"
    assert "not text" in reasons[4]
    assert reasons[5] == "missing 'instruction'"  # a JSON string is a text row, unusable as an instruction


def test_chat_rows_with_bad_messages_are_dropped(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": "oi"}, {"role": "assistant", "content": "olá"}]},
        {"messages": [{"role": "user", "content": "oi"}]},
        {"messages": [{"role": "wizard", "content": "oi"}, {"role": "assistant", "content": "olá"}]},
        {"messages": []},
        {"messages": [{"role": "user", "content": "oi"}, {"role": "assistant", "content": ""}]},
    ]
    rs = load_records(str(write_jsonl(tmp_path / "chat.jsonl", rows)))
    assert len(rs) == 1
    reasons = dict(rs.dropped)
    assert reasons[2] == "no assistant message"
    assert "unknown role 'wizard'" in reasons[3]
    assert "non-empty list" in reasons[4]
    assert "empty" in reasons[5]


def test_missing_columns_lists_found_and_expected(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DataError) as err:
        load_records(str(path))
    message = str(err.value)
    assert "'question'" in message and "'answer'" in message
    assert "'instruction' + 'output'" in message and "'messages'" in message


def test_missing_columns_csv(tmp_path):
    path = write_csv(tmp_path / "qa.csv", ["pergunta", "resposta"], [["a", "b"]])
    with pytest.raises(DataError, match="'pergunta', 'resposta'"):
        load_records(str(path))


def test_nothing_usable(tmp_path):
    path = write_jsonl(tmp_path / "none.jsonl", [{"instruction": "a", "output": ""}, {"instruction": "b"}])
    with pytest.raises(DataError, match="none of the 2 rows") as err:
        load_records(str(path))
    assert "line 1: empty 'output'" in str(err.value) and "line 2: missing 'output'" in str(err.value)


def test_to_messages_joins_instruction_and_input():
    assert to_messages({**INSTRUCTION, "system": "Seja breve."}, "instruction") == [
        {"role": "system", "content": "Seja breve."},
        {"role": "user", "content": "Traduza para o inglês.\n\nOlá, mundo!"},
        {"role": "assistant", "content": "Hello, world!"},
    ]
    assert to_messages({"instruction": "Oi", "input": "", "output": "Olá"}, "instruction")[0]["content"] == "Oi"
    with pytest.raises(ValueError):
        to_messages({"text": "x"}, "text")


def test_mapping_on_an_upload(tmp_path):
    path = tmp_path / "qa.csv"
    path.write_text("question;answer\nOi?;Olá\nTchau?;Até logo\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"Found: 'question', 'answer'.*--columns.*'instruction=question, output=answer'"):
        load_source(str(path))
    rs = load_source(str(path), columns="instruction=question, output=answer")
    assert rs.format == "instruction" and rs.records[0]["output"] == "Olá" and rs.columns == ["question", "answer"]
    with pytest.raises(DataError, match=r"'resposta', which is not a column.*Columns found: 'question', 'answer'"):
        load_source(str(path), columns="instruction=question, output=resposta")
    with pytest.raises(DataError, match="needs instruction \\+ output.*output=answer"):
        load_source(str(path), columns="instruction=question")


def test_mapping_chooses_between_formats_and_renames_chat(tmp_path):
    both = write_jsonl(tmp_path / "both.jsonl", [{"text": "um texto", "instruction": "faça", "output": "feito"}])
    detected = load_source(str(both))
    assert detected.format == "instruction" and "several formats" in detected.notes[0] and "text=text" in detected.notes[0]
    assert load_source(str(both), columns="text=text").format == "text"
    conv = write_jsonl(tmp_path / "conv.jsonl", [{"dialog": CHAT[0]["messages"]}])
    with pytest.raises(DataError, match="'messages=dialog'"):
        load_source(str(conv))
    assert load_source(str(conv), columns="messages=dialog").records[0]["messages"][1]["content"] == "Olá!"


def test_suggest_mapping_falls_back_to_the_real_column_names():
    assert suggest_mapping(["pergunta", "resposta"]) == "instruction=pergunta, output=resposta"
    assert suggest_mapping(["body", "id"]) == "text=body"
    assert suggest_mapping(["a", "b"]) == "instruction=a, output=b"
    assert suggest_mapping(["only"]) == "text=only"
