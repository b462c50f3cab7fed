"""Tests of engine/data/hub.py: Hub datasets (load_dataset monkeypatched; the offline path for real) through the same
normalization as files, and their error messages."""

from __future__ import annotations

import datasets
import pytest
from conftest import CHAT, QA
from datasets.exceptions import DatasetNotFoundError

from engine.data import hub
from engine.data.build import load_source
from engine.errors import DataError


def test_hub_dataset_goes_through_the_same_normalization(fake_hub):
    tables, calls = fake_hub
    tables["someone/chat-pt"] = [CHAT[0], {"messages": [{"role": "user", "content": "sem resposta"}]}]
    rs = load_source("hub:someone/chat-pt", hub_config="pt", hub_split="train[:2000]")
    assert rs.format == "chat" and len(rs) == 1 and rs.unit == "row"
    assert rs.records[0]["messages"][1] == {"role": "assistant", "content": "Olá!"}
    assert rs.dropped == [(2, "no assistant message")]
    assert "hub:someone/chat-pt" in rs.summary()
    (args, kwargs), = calls
    assert args == ("someone/chat-pt", "pt") and kwargs == {"split": "train[:2000]"}  # never trust_remote_code


def test_hub_dataset_sharegpt_and_default_config(fake_hub):
    tables, calls = fake_hub
    tables["someone/sharegpt"] = [CHAT[1]]
    rs = load_source("hub:someone/sharegpt")
    assert rs.format == "chat" and rs.records[0]["messages"][0]["role"] == "user"
    assert calls[0][0] == ("someone/sharegpt", None) and calls[0][1]["split"] == "train[:200001]"  # unsliced: capped at download


def test_hub_dataset_with_column_mapping(fake_hub):
    tables, _ = fake_hub
    tables["someone/qa"] = QA
    with pytest.raises(DataError, match=r"Found: 'question', 'answer', 'context'.*instruction=question, input=context, output=answer"):
        load_source("hub:someone/qa")
    rs = load_source("hub:someone/qa", columns="instruction=Question, output=Answer, input=Context")
    assert rs.format == "instruction" and rs.records[1] == {"instruction": "Capital da França?", "input": "Europa", "output": "Paris"}


def test_hub_offline_error_is_an_instruction_not_a_traceback():
    # real datasets.load_dataset: tests/conftest.py sets HF_DATASETS_OFFLINE=1 and nothing is cached
    with pytest.raises(DataError) as err:
        load_source("hub:nobody-here/no-such-dataset-xyz", hub_split="train[:10]")
    text = str(err.value)
    assert "not reachable" in text and "upload the data as a file" in text and "hub:nobody-here/no-such-dataset-xyz" in text
    assert err.value.__cause__ is None and err.value.__suppress_context__


@pytest.mark.parametrize("exc,fragment", [
    (DatasetNotFoundError("Dataset 'a/b' doesn't exist on the Hub or cannot be accessed."), "Check the name"),
    (DatasetNotFoundError("Dataset 'a/b' is a gated dataset on the Hub. You must be authenticated to access it."), "gated.*HF_TOKEN"),
    (RuntimeError("Dataset scripts are no longer supported, but found b.py"), "loading script.*never run"),
    (ValueError("BuilderConfig 'xx' not found. Available: ['en', 'pt']"), "Available: \\['en', 'pt'\\].*Hub config"),
    (ValueError('Unknown split "dev". Should be one of [\'train\', \'test\'].'), "Unknown split.*Hub split"),
    (ConnectionError("Couldn't reach 'a/b' on the Hub (LocalEntryNotFoundError)"), "not reachable"),
    (OSError("disk full"), "OSError: disk full"),
])
def test_hub_errors_say_what_to_do(monkeypatch, exc, fragment):
    def load_dataset(*args, **kwargs):
        raise exc

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(DataError, match=fragment):
        load_source("hub:a/b")


def test_hub_big_split_asks_for_a_slice(fake_hub, monkeypatch):
    tables, _ = fake_hub
    tables["someone/big"] = [{"text": f"linha {i}"} for i in range(5)]
    monkeypatch.setattr(hub, "MAX_HUB_ROWS", 3)
    with pytest.raises(DataError, match=r"5 rows.*train\[:20000\]"):
        load_source("hub:someone/big", hub_split="train")
