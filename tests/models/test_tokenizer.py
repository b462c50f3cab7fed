"""Tests of engine/models/tokenizer.py: the locally trained byte-level BPE tokenizer and the default chat template."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from engine.data.formats import load_records
from engine.errors import EngineError
from engine.models.tokenizer import DEFAULT_CHAT_TEMPLATE, SPECIAL_TOKENS, ensure_chat_template, train_tokenizer

CONVERSATION = [
    {"role": "system", "content": "Responda em português."},
    {"role": "user", "content": "O que é LoRA?"},
    {"role": "assistant", "content": "Uma técnica de ajuste fino."},
]

ROUND_TRIP_TEXTS = [
    "Olá, ação é coração! Memória, atenção, função, pão, avô, à noite.",
    "Quantização em 4 bits: NF4 usa 16 níveis.\n\n  Duas linhas em branco e espaços  finais  ",
    "Tabs\tand trailing space \nCJK 日本語, emoji 🚀, ünïcödé — «aspas» “curvas”.",
    "a . b , c ? ( d )",  # the 'clean up spaces' pass of old tokenizers would corrupt this
]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    texts = [r["text"] for r in load_records("builtin:corpus").records]
    return train_tokenizer(texts, vocab_size=512, model_max_length=256)


def test_special_tokens_and_eos_design(tokenizer):
    assert tokenizer.convert_ids_to_tokens(list(range(len(SPECIAL_TOKENS)))) == list(SPECIAL_TOKENS)
    assert tokenizer.eos_token == "<|end|>"
    assert tokenizer.bos_token == tokenizer.unk_token == "<|endoftext|>"
    assert tokenizer.pad_token == "<|pad|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert len(tokenizer) == 512
    assert tokenizer.model_max_length == 256
    # role markers are single special tokens, never split, removed by skip_special_tokens
    for marker in ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1
    assert tokenizer.decode(tokenizer.encode("<|user|>\noi<|end|>"), skip_special_tokens=True) == "\noi"


def test_encoding_adds_no_special_tokens(tokenizer):
    ids = tokenizer("Olá mundo")["input_ids"]
    assert ids == tokenizer("Olá mundo", add_special_tokens=False)["input_ids"]
    assert not set(ids) & set(tokenizer.all_special_ids)


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_decode_encode_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_digits_are_split_individually(tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode("Em 03/11/2024 custou 1234567 bytes"))
    digit_tokens = [t for t in tokens if any(c.isdigit() for c in t)]
    assert "".join(digit_tokens) == "031120241234567"
    assert all(len(t) == 1 for t in digit_tokens)


def test_chat_template_format(tokenizer):
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert text == (
        "<|system|>\nResponda em português.<|end|>\n"
        "<|user|>\nO que é LoRA?<|end|>\n"
        "<|assistant|>\nUma técnica de ajuste fino.<|end|>\n"
    )
    prompt = tokenizer.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
    assert prompt == text[: text.index("Uma técnica")]
    assert prompt.endswith("<|assistant|>\n")


def test_assistant_turn_ends_with_the_eos_id(tokenizer):
    ids = tokenizer.apply_chat_template(CONVERSATION, tokenize=True, return_dict=True)["input_ids"]
    newline = tokenizer.encode("\n")
    assert ids[-1:] == newline
    assert ids[-2] == tokenizer.eos_token_id  # what generate() stops on ends the answer


def test_chat_template_is_prefix_stable(tokenizer):
    full = tokenizer.apply_chat_template(CONVERSATION, return_dict=True)["input_ids"]
    prompt = tokenizer.apply_chat_template(CONVERSATION[:2], add_generation_prompt=True, return_dict=True)["input_ids"]
    assert full[: len(prompt)] == prompt


def test_save_and_reload(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.chat_template == DEFAULT_CHAT_TEMPLATE
    assert (reloaded.eos_token, reloaded.pad_token, reloaded.bos_token) == ("<|end|>", "<|pad|>", "<|endoftext|>")
    assert reloaded.model_max_length == 256
    for text in ROUND_TRIP_TEXTS:
        assert reloaded.encode(text) == tokenizer.encode(text)
        assert reloaded.decode(reloaded.encode(text)) == text
    assert reloaded.apply_chat_template(CONVERSATION, tokenize=False) == tokenizer.apply_chat_template(
        CONVERSATION, tokenize=False
    )


def test_model_max_length_is_settable(tokenizer):
    small = train_tokenizer(["abc def ghi"] * 3, vocab_size=300, model_max_length=64)
    assert small.model_max_length == 64
    small.model_max_length = 128
    assert small.model_max_length == 128


def test_vocab_too_small_is_refused():
    with pytest.raises(EngineError, match="vocab_size"):
        train_tokenizer(["abc"], vocab_size=100)


def _foreign_tokenizer(tokenizer, **special) -> PreTrainedTokenizerFast:
    """A tokenizer without chat template (like GPT-2 or a base model): the same vocab, other specials."""
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, **special)


def test_ensure_chat_template_adds_template_and_pad(tokenizer):
    foreign = _foreign_tokenizer(tokenizer, eos_token="<|endoftext|>")
    assert not foreign.chat_template and foreign.pad_token is None
    assert ensure_chat_template(foreign) is True
    assert foreign.chat_template == DEFAULT_CHAT_TEMPLATE
    assert foreign.pad_token == foreign.eos_token == "<|endoftext|>"
    assert ensure_chat_template(foreign) is False  # idempotent
    # with a foreign tokenizer the assistant turn ends with *its* eos, so generation still stops there
    text = foreign.apply_chat_template(CONVERSATION, tokenize=False)
    assert text.endswith("<|assistant|>\nUma técnica de ajuste fino.<|endoftext|>\n")
    assert "<|user|>\nO que é LoRA?<|end|>\n" in text


def test_ensure_chat_template_keeps_existing(tokenizer):
    assert ensure_chat_template(tokenizer) is False
    assert tokenizer.chat_template == DEFAULT_CHAT_TEMPLATE


def test_ensure_chat_template_without_eos_or_pad(tokenizer):
    bare = _foreign_tokenizer(tokenizer)
    with pytest.raises(EngineError, match="eos"):
        ensure_chat_template(bare)
