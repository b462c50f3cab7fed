"""Tests of engine/data/records.py: loading and format detection, malformed input, masking, lengths, chunking."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

from engine.data import records as data
from engine.data.records import IGNORE_INDEX, chunk_corpus, load_records, preview, record_texts, split_eval, to_messages, tokenize_records
from engine.errors import ConfigError, DataError
from engine.models.tokenizer import train_tokenizer

INSTRUCTION = {"instruction": "Traduza para o inglês.", "input": "Olá, mundo!", "output": "Hello, world!"}


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return train_tokenizer(record_texts(load_records("builtin:corpus")), vocab_size=512, model_max_length=256)


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_csv(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def trained_spans(example: dict, tokenizer) -> list[str]:
    """Decoded runs of consecutive trained-on labels."""
    spans, run = [], []
    for label in example["labels"] + [IGNORE_INDEX]:
        if label != IGNORE_INDEX:
            run.append(label)
        elif run:
            spans.append(tokenizer.decode(run, skip_special_tokens=False))
            run = []
    return spans


def from_records(records: list[dict], fmt: str) -> data.RecordSet:
    return data.RecordSet(records=records, format=fmt, source="test.jsonl")


# --------------------------------------------------------------------------------------------------
# built-in samples
# --------------------------------------------------------------------------------------------------


def test_builtin_samples_load():
    corpus = load_records("builtin:corpus")
    assert corpus.format == "text" and len(corpus) > 250 and not corpus.dropped
    assert 60_000 <= (data.SAMPLES_DIR / "corpus.txt").stat().st_size <= 100_000
    instructions = load_records("builtin:instructions")
    assert instructions.format == "instruction" and len(instructions) >= 150 and not instructions.dropped
    dates = load_records("builtin:dates")
    assert dates.format == "instruction" and len(dates) == 600
    assert set(data.BUILTIN_DATASETS) == set(data.BUILTIN_FILES)


def test_builtin_unknown_name():
    with pytest.raises(DataError, match="builtin:corpus"):
        load_records("builtin:nope")


# --------------------------------------------------------------------------------------------------
# format detection
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# malformed input: DataError naming the problem
# --------------------------------------------------------------------------------------------------


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
    monkeypatch.setattr(data, "MAX_FILE_BYTES", 1000)
    path = write_jsonl(tmp_path / "big.jsonl", [INSTRUCTION] * 50)
    with pytest.raises(DataError, match="limit is"):
        load_records(str(path))


def test_line_too_long(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "MAX_LINE_BYTES", 200)
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


def test_nothing_usable(tmp_path):
    path = write_jsonl(tmp_path / "none.jsonl", [{"instruction": "a", "output": ""}, {"instruction": "b"}])
    with pytest.raises(DataError, match="none of the 2 rows") as err:
        load_records(str(path))
    assert "line 1: empty 'output'" in str(err.value) and "line 2: missing 'output'" in str(err.value)


# --------------------------------------------------------------------------------------------------
# messages, masking, eos
# --------------------------------------------------------------------------------------------------


def test_to_messages_joins_instruction_and_input():
    assert to_messages({**INSTRUCTION, "system": "Seja breve."}, "instruction") == [
        {"role": "system", "content": "Seja breve."},
        {"role": "user", "content": "Traduza para o inglês.\n\nOlá, mundo!"},
        {"role": "assistant", "content": "Hello, world!"},
    ]
    assert to_messages({"instruction": "Oi", "input": "", "output": "Olá"}, "instruction")[0]["content"] == "Oi"
    with pytest.raises(ValueError):
        to_messages({"text": "x"}, "text")


def test_prompt_masking_trains_only_the_answer_and_eos(tokenizer):
    tok = tokenize_records(from_records([INSTRUCTION], "instruction"), tokenizer, 256)
    example = tok.examples[0]
    messages = to_messages(INSTRUCTION, "instruction")
    full = tokenizer.apply_chat_template(messages, return_dict=True)["input_ids"]
    prompt = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, return_dict=True)["input_ids"]
    assert example["input_ids"] == full
    assert example["attention_mask"] == [1] * len(full)
    assert example["labels"][: len(prompt)] == [IGNORE_INDEX] * len(prompt)
    assert trained_spans(example, tokenizer) == ["Hello, world!<|end|>"]
    assert example["labels"][-1] == IGNORE_INDEX  # the "\n" after <|end|> is format, not answer


def test_multi_turn_masks_every_non_assistant_span(tokenizer):
    conv = [
        {"role": "system", "content": "Seja breve."},
        {"role": "user", "content": "Oi"},
        {"role": "assistant", "content": "Olá!"},
        {"role": "user", "content": "Tudo bem?"},
        {"role": "assistant", "content": "Tudo ótimo."},
    ]
    example = tokenize_records(from_records([{"messages": conv}], "chat"), tokenizer, 256).examples[0]
    assert trained_spans(example, tokenizer) == ["Olá!<|end|>", "Tudo ótimo.<|end|>"]
    assert tokenizer.decode(example["input_ids"]) == tokenizer.apply_chat_template(conv, tokenize=False)


def test_train_on_prompt(tokenizer):
    example = tokenize_records(
        from_records([INSTRUCTION], "instruction"), tokenizer, 256, train_on_prompt=True
    ).examples[0]
    assert example["labels"] == example["input_ids"]


def test_text_rows_get_eos(tokenizer):
    tok = tokenize_records(from_records([{"text": "Olá mundo."}], "text"), tokenizer, 256)
    example = tok.examples[0]
    assert example["input_ids"][-1] == tokenizer.eos_token_id
    assert example["labels"] == example["input_ids"]
    assert tokenizer.decode(example["input_ids"]) == "Olá mundo.<|end|>"


def test_eos_is_added_when_the_template_does_not_write_it(tokenizer):
    foreign = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|endoftext|>")
    foreign.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    tok = tokenize_records(from_records([INSTRUCTION], "instruction"), foreign, 256)
    example = tok.examples[0]
    assert example["input_ids"][-1] == foreign.eos_token_id
    assert trained_spans(example, foreign) == ["Hello, world!\n<|endoftext|>"]
    assert foreign.pad_token == "<|endoftext|>"  # ensure_chat_template's fallback


def test_default_template_is_added_to_a_tokenizer_without_one(tokenizer):
    foreign = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|endoftext|>")
    tok = tokenize_records(from_records([INSTRUCTION], "instruction"), foreign, 256)
    assert tok.report.notes and "default" in tok.report.notes[0]
    assert trained_spans(tok.examples[0], foreign) == ["Hello, world!<|endoftext|>"]


# --------------------------------------------------------------------------------------------------
# lengths, report, collator
# --------------------------------------------------------------------------------------------------


LONG = {"instruction": "Resuma.", "input": "palavra " * 40, "output": "Um resumo curto com várias palavras."}


def test_truncate(tokenizer):
    rs = from_records([INSTRUCTION, LONG], "instruction")
    full = tokenize_records(rs, tokenizer, 512)
    long_len = len(full.examples[1]["input_ids"])
    cut_at = long_len - 5  # keeps the prompt and part of the answer
    tok = tokenize_records(rs, tokenizer, cut_at, too_long="truncate")
    assert len(tok.examples) == 2 and tok.report.truncated == 1
    assert tok.examples[1]["input_ids"] == full.examples[1]["input_ids"][:cut_at]
    assert tok.report.max_len == cut_at


def test_drop(tokenizer):
    rs = from_records([INSTRUCTION, LONG], "instruction")
    tok = tokenize_records(rs, tokenizer, 60, too_long="drop")
    assert len(tok.examples) == 1 and tok.report.truncated == 0
    assert tok.report.rows_in == 2 and tok.report.rows_kept == 1
    ((row, reason),) = tok.report.dropped
    assert row == 2 and "longer than max_seq_len 60" in reason


def test_prompt_longer_than_max_len_is_dropped_even_when_truncating(tokenizer):
    rs = from_records([INSTRUCTION, LONG], "instruction")
    tok = tokenize_records(rs, tokenizer, 40, too_long="truncate")
    assert [n for n, _ in tok.report.dropped] == [2]
    assert "prompt alone" in tok.report.dropped[0][1]


def test_everything_dropped_raises(tokenizer):
    with pytest.raises(DataError, match="No usable rows"):
        tokenize_records(from_records([LONG], "instruction"), tokenizer, 20, too_long="drop")


def test_bad_options(tokenizer):
    rs = from_records([INSTRUCTION], "instruction")
    with pytest.raises(ConfigError, match="too_long"):
        tokenize_records(rs, tokenizer, 64, too_long="cut")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_seq_len"):
        tokenize_records(rs, tokenizer, 1)


def test_report_and_load_drops_are_combined(tokenizer, tmp_path):
    rows = [INSTRUCTION, {"instruction": "x", "output": ""}, LONG]
    rs = load_records(str(write_jsonl(tmp_path / "r.jsonl", rows)))
    tok = tokenize_records(rs, tokenizer, 60, too_long="drop")
    report = tok.report
    assert report.rows_in == 3 and report.rows_kept == 1
    assert [n for n, _ in report.dropped] == [2, 3]
    assert sum(report.length_histogram.values()) == report.rows_kept
    assert report.n_tokens == sum(len(e["input_ids"]) for e in tok.examples)
    assert report.n_trainable_tokens == len(tokenizer.encode("Hello, world!")) + 1
    assert "1/3 rows kept" in report.summary() and "line 2" in report.summary()


def test_examples_work_with_the_seq2seq_collator(tokenizer):
    tok = tokenize_records(load_records("builtin:instructions"), tokenizer, 128)
    collator = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE_INDEX)
    batch = collator(tok.examples[:4])
    width = max(len(e["input_ids"]) for e in tok.examples[:4])
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape == (4, width)
    short = min(range(4), key=lambda i: len(tok.examples[i]["input_ids"]))
    assert batch["labels"][short, -1].item() == IGNORE_INDEX
    assert batch["input_ids"][short, -1].item() == tokenizer.pad_token_id


# --------------------------------------------------------------------------------------------------
# chunking, split, preview
# --------------------------------------------------------------------------------------------------


def test_chunk_corpus(tokenizer):
    texts = ["Primeiro texto.", "Second text, a bit longer than the first.", "Terceiro."]
    blocks = chunk_corpus(texts, tokenizer, 8)
    stream = [i for b in blocks for i in b["input_ids"]]
    expected = [i for t in texts for i in tokenizer.encode(t) + [tokenizer.eos_token_id]]
    assert stream == expected or stream == expected[: len(stream)]
    assert len(expected) - len(stream) <= 1  # only a 1-token tail may be left out
    assert all(len(b["input_ids"]) == 8 for b in blocks[:-1])
    assert all(b["labels"] == b["input_ids"] and b["attention_mask"] == [1] * len(b["input_ids"]) for b in blocks)
    with pytest.raises(ConfigError):
        chunk_corpus(texts, tokenizer, 1)
    with pytest.raises(DataError):
        chunk_corpus(["", "  "], tokenizer, 8)


def test_chunk_builtin_corpus(tokenizer):
    blocks = chunk_corpus(record_texts(load_records("builtin:corpus")), tokenizer, 128)
    assert len(blocks) > 100


def test_split_eval():
    items = list(range(100))
    train, evals = split_eval(items, 0.1, seed=3)
    assert len(evals) == 10 and len(train) == 90
    assert sorted(train + evals) == items and train == sorted(train)
    assert split_eval(items, 0.1, seed=3) == (train, evals)
    assert split_eval(items, 0.1, seed=4)[1] != evals
    assert split_eval(items, 0.0, seed=3) == (items, [])
    assert split_eval([1, 2], 0.01, seed=0)[1] != []  # at least one when asked for any
    assert split_eval([1], 0.5, seed=0) == ([1], [])  # never an empty train set
    with pytest.raises(ConfigError):
        split_eval(items, 1.0, seed=0)


def test_preview_marks_trained_spans(tokenizer):
    rs = from_records([INSTRUCTION, LONG], "instruction")
    items = preview(rs, tokenizer, 64, n=5)
    assert len(items) == 2
    first = items[0]
    assert first["text"] == (
        "<|user|>\nTraduza para o inglês.\n\nOlá, mundo!<|end|>\n<|assistant|>\n⟦Hello, world!<|end|>⟧\n"
    )
    assert first["row"] == 1 and first["dropped"] is None
    assert first["n_trainable"] == len(tokenizer.encode("Hello, world!")) + 1
    assert items[1]["dropped"] and "prompt alone" in items[1]["dropped"]


def test_preview_text_format(tokenizer):
    items = preview(from_records([{"text": "Olá."}], "text"), tokenizer, 64)
    assert items[0]["text"] == "⟦Olá.<|end|>⟧"
