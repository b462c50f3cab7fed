"""Tests of engine/data/tokenize.py: prompt masking and eos, long rows, the report, chunking and the eval split."""

from __future__ import annotations

import pytest
from conftest import INSTRUCTION, LONG, corpus_tokenizer, from_records, trained_spans, write_jsonl
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

from engine.data.formats import load_records, record_texts, to_messages
from engine.data.tokenize import IGNORE_INDEX, chunk_corpus, split_eval, tokenize_records
from engine.errors import ConfigError, DataError
from engine.models.tokenizer import ensure_chat_template


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return corpus_tokenizer()


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
    assert ensure_chat_template(foreign) is False  # the caller readies the tokenizer: its own template is kept
    tok = tokenize_records(from_records([INSTRUCTION], "instruction"), foreign, 256)
    example = tok.examples[0]
    assert example["input_ids"][-1] == foreign.eos_token_id
    assert trained_spans(example, foreign) == ["Hello, world!\n<|endoftext|>"]
    assert foreign.pad_token == "<|endoftext|>"  # ensure_chat_template's fallback


def test_a_tokenizer_without_a_template_is_readied_by_the_caller(tokenizer):
    # data never imports the models: the caller (the loaders, the data check) gives such a tokenizer the default template
    foreign = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|endoftext|>")
    with pytest.raises(ValueError, match="ensure_chat_template"):
        tokenize_records(from_records([INSTRUCTION], "instruction"), foreign, 256)
    assert ensure_chat_template(foreign) is True
    tok = tokenize_records(from_records([INSTRUCTION], "instruction"), foreign, 256)
    assert trained_spans(tok.examples[0], foreign) == ["Hello, world!<|endoftext|>"]


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
