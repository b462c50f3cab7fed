"""Tests of engine/data/build.py: the train and eval examples of a TrainConfig (column mapping, long rows, a separate
eval set), in the data step and in a real run."""

from __future__ import annotations

import json

import pytest
from conftest import corpus_tokenizer, write_jsonl
from transformers import PreTrainedTokenizerFast

from engine.config import TrainConfig
from engine.data.build import build_train_data


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return corpus_tokenizer()


def _prepare(cfg, tokenizer, max_len=64):
    data = build_train_data(cfg, tokenizer, max_len)
    return data.train, data.evals, data.report, data.event_fields()


def test_training_uses_mapping_too_long_and_eval_file(tokenizer, tmp_path):
    rows = [{"q": f"Pergunta número {i}?", "a": f"Resposta {i}."} for i in range(12)]
    rows[3]["a"] = "muito longa " * 80
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    eval_file = write_jsonl(tmp_path / "eval.jsonl", [{"q": "Oi?", "a": "Olá."}, {"q": "Tchau?", "a": "Até."}])
    base = dict(method="full", dataset=str(train_file), columns="instruction=q, output=a", eval_fraction=0.2)
    train, evals, report, _ = _prepare(TrainConfig(**base, too_long="drop"), tokenizer)
    assert report["rows_kept"] == 11 and report["dropped"][0][0] == 4 and "longer than max_seq_len" in report["dropped"][0][1]
    assert len(train) + len(evals) == 11 and len(evals) == 2  # eval_fraction used
    train, evals, report, _ = _prepare(TrainConfig(**base, too_long="truncate"), tokenizer)
    assert report["rows_kept"] == 12 and report["truncated"] == 1 and max(len(e["input_ids"]) for e in train) == 64
    train, evals, report, event = _prepare(TrainConfig(**base, eval_dataset=str(eval_file)), tokenizer)
    assert len(train) == 12 and len(evals) == 2 and "2 instruction rows from eval.jsonl" in report["eval_source"]
    assert all(any(x != -100 for x in e["labels"]) and e["labels"][0] == -100 for e in evals)  # masked like training
    assert event["eval_examples"] == 2 and event["dropped"] == 0  # the run's `data` event counts the dropped rows


def test_eval_from_the_hub_for_text_data_is_chunked(tokenizer, tmp_path, fake_hub):
    tables, calls = fake_hub
    tables["someone/corpus"] = [{"body": "Um parágrafo de teste sobre memória de GPU. " * 8}]
    cfg = TrainConfig(method="full", dataset="hub:someone/corpus", hub_split="train", eval_dataset="hub:someone/corpus", eval_split="test[:5]",
                      columns="text=body")
    train, evals, report, _ = _prepare(cfg, tokenizer, max_len=32)
    assert report["eval_blocks"] == len(evals) >= 2 and all(len(e["input_ids"]) <= 32 for e in evals)
    assert [c[1]["split"] for c in calls] == ["train[:200001]", "test[:5]"]  # an unsliced split is capped at download


def test_a_real_run_with_mapping_drop_and_eval_file(runs_dir, tmp_path):
    from engine.training.run import run_training

    rows = [{"pergunta": f"Converta {d:02d}/05/2023", "resposta": f"2023-05-{d:02d}"} for d in range(1, 21)]
    train_file = write_jsonl(tmp_path / "t.jsonl", rows)
    eval_file = write_jsonl(tmp_path / "e.jsonl", rows[:3])
    cfg = TrainConfig(method="full", base_model="builtin:compact-mini", dataset=str(train_file), eval_dataset=str(eval_file),
                      columns="instruction=pergunta, output=resposta", too_long="drop", max_steps=2, micro_batch_size=4, max_seq_len=64,
                      save_steps=100, logging_steps=1, learning_rate=1e-3)
    done = run_training(cfg, tmp_path / "run", runs_dir=runs_dir)
    assert done["type"] == "done" and done["eval_loss"] is not None
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    data_event = next(e for e in events if e["type"] == "data")
    assert data_event["train_examples"] == 20 and data_event["eval_examples"] == 3
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "columns: instruction=pergunta, output=resposta" in saved and "too_long: drop" in saved
