"""Tests of engine/inference/tasks.py: the date task's generator, its sample files, the scorer and evaluation."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from engine.data.files import SAMPLES_DIR
from engine.data.formats import load_records, record_texts
from engine.inference.tasks import FILES, TaskScore, date_items, evaluate_task, normalize_answer, score_outputs, write_date_files
from engine.models.tokenizer import train_tokenizer

DATE_IN_PROMPT = re.compile(r"(\d\d)/(\d\d)/(\d{4})")


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return train_tokenizer(record_texts(load_records("builtin:corpus")), vocab_size=512, model_max_length=128)


def test_sizes_and_determinism():
    train, test = date_items("train"), date_items("test")
    assert len(train) == 600 and len(test) == 100
    assert date_items("train") == train and date_items("test") == test
    assert date_items("train", 10) == train[:10]  # the first n items do not depend on n
    assert len(date_items("test", 250)) == 250


def test_items_are_correct_and_unambiguous():
    for item in date_items("train") + date_items("test"):
        assert set(item) == {"instruction", "input", "output"} and item["input"] == ""
        day, month, year = DATE_IN_PROMPT.search(item["instruction"]).groups()
        assert item["output"] == f"{year}-{month}-{day}"
        dt.date.fromisoformat(item["output"])  # a real calendar date
        assert len(DATE_IN_PROMPT.findall(item["instruction"])) == 1


def test_train_and_test_dates_are_disjoint():
    train = {i["output"] for i in date_items("train", 5000)}
    test = {i["output"] for i in date_items("test", 1000)}
    assert not train & test


def test_both_languages_and_several_templates():
    items = date_items("train")
    assert any("Converta" in i["instruction"] or "Reescreva" in i["instruction"] for i in items)
    assert any("Convert" in i["instruction"] or "Rewrite" in i["instruction"] for i in items)
    templates = {DATE_IN_PROMPT.sub("{d}", i["instruction"]) for i in items}
    assert len(templates) >= 8


def test_bad_arguments():
    with pytest.raises(ValueError):
        date_items("validation")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        date_items("test", 10**6)


def test_sample_files_match_the_generator():
    for split, name in FILES.items():
        lines = (SAMPLES_DIR / name).read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == date_items(split), (
            f"regenerate with python -m engine.inference.tasks ({name})"
        )


def test_write_date_files(tmp_path):
    paths = write_date_files(tmp_path)
    for path in paths:
        assert path.read_bytes() == (SAMPLES_DIR / path.name).read_bytes()


@pytest.mark.parametrize(
    "output,expected",
    [
        ("2024-11-03", "2024-11-03"),
        ("  2024-11-03.  ", "2024-11-03"),
        ("2024-11-03\nmais texto depois", "2024-11-03"),
        ("\n\n2024-11-03!", "2024-11-03"),
        ('"2024-11-03"', "2024-11-03"),
        ("", ""),
    ],
)
def test_normalize_answer(output, expected):
    assert normalize_answer(output) == expected


def test_score_outputs():
    items = date_items("test", 4)
    outputs = [items[0]["output"] + ".", " " + items[1]["output"] + "\nblah", items[2]["output"][:-1], "não sei"]
    score = score_outputs(items, outputs)
    assert isinstance(score, TaskScore)
    assert (score.correct, score.n, score.accuracy) == (2, 4, 0.5)
    assert score.examples[0] == (items[0]["instruction"], items[0]["output"], outputs[0])
    assert len(score.examples) == 4
    assert score.summary() == "accuracy 50% (2/4)" and score.summary("pt-BR") == "acurácia 50% (2/4)"
    assert len(score_outputs(date_items("test", 20), ["x"] * 20).examples) == 5
    assert score_outputs([], []).accuracy == 0.0
    with pytest.raises(ValueError):
        score_outputs(items, outputs[:2])


class OracleModel(torch.nn.Module):
    """A stand-in causal LM whose `generate` reads the date in each prompt and writes the right answer:
    checks the batching, left padding, slicing and decoding of evaluate_task (accuracy must be 1)."""

    def __init__(self, tokenizer):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.tokenizer = tokenizer
        self.calls: list[dict] = []

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        self.calls.append({"shape": tuple(input_ids.shape), "mask": attention_mask.clone(), **kwargs})
        answers = []
        for row, mask in zip(input_ids, attention_mask, strict=True):
            assert mask[-1] == 1  # left padded: every prompt ends in the last column
            prompt = self.tokenizer.decode(row[mask.bool()])
            assert prompt.endswith("<|assistant|>\n")
            day, month, year = DATE_IN_PROMPT.search(prompt).groups()
            answers.append(self.tokenizer.encode(f"{year}-{month}-{day}") + [self.tokenizer.eos_token_id])
        width = max(len(a) for a in answers)
        new = [a + [self.tokenizer.pad_token_id] * (width - len(a)) for a in answers]
        return torch.cat([input_ids, torch.tensor(new)[:, :max_new_tokens]], dim=1)


def test_evaluate_task_with_an_oracle(tokenizer):
    model = OracleModel(tokenizer)
    model.train()
    seen = []
    score = evaluate_task(model, tokenizer, date_items("test", 21), batch_size=8, on_progress=lambda done, total: seen.append((done, total)))
    assert (score.accuracy, score.n, score.correct) == (1.0, 21, 21)
    assert seen == [(8, 21), (16, 21), (21, 21)]  # its own progress, batch by batch (the run's progress bar shows it)
    assert [c["shape"][0] for c in model.calls] == [8, 8, 5]
    assert any((c["mask"] == 0).any() for c in model.calls)  # prompts of different lengths got padded
    assert model.calls[0]["do_sample"] is False
    assert model.calls[0]["eos_token_id"] == [tokenizer.eos_token_id]
    assert model.training  # mode restored
    assert tokenizer.padding_side == "right"  # the (possibly shared) tokenizer was not modified


def test_evaluate_task_on_a_tiny_random_gpt2(tokenizer):
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config).eval()
    items = date_items("test", 6)
    score = evaluate_task(model, tokenizer, items, max_new_tokens=12, batch_size=4)
    assert 0.0 <= score.accuracy <= 1.0 and score.n == 6
    assert len(score.examples) == 5 and all(isinstance(got, str) for _, _, got in score.examples)
    assert not model.training  # left as it was
