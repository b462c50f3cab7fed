"""Tests of engine/data/preview.py: the first rows as the model sees them, trained-on spans marked."""

from __future__ import annotations

import pytest
from conftest import INSTRUCTION, LONG, corpus_tokenizer, from_records
from transformers import PreTrainedTokenizerFast

from engine.data.preview import preview


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return corpus_tokenizer()


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
