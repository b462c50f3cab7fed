"""Tests of engine/data/sources.py and its hooks: Hub datasets (load_dataset monkeypatched; the offline path for
real), the column mapping, long-row handling and a separate eval set, in training, the preview and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from datasets.exceptions import DatasetNotFoundError

from engine.config import TrainConfig
from engine.data import sources
from engine.data.records import load_records, record_texts
from engine.data.sources import load_source, suggest_mapping
from engine.errors import ConfigError, DataError
from engine.estimator.handoff import check_ui_train_config
from engine.models.tokenizer import train_tokenizer
from engine.runs import EventLog

QA = [{"Question": "Quanto é 2+2?", "Answer": "4", "Context": ""}, {"Question": "Capital da França?", "Answer": "Paris", "Context": "Europa"}]
CHAT = [{"messages": [{"role": "user", "content": "Oi"}, {"role": "assistant", "content": "Olá!"}]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]}]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(record_texts(load_records("builtin:corpus")), vocab_size=512, model_max_length=256)


@pytest.fixture
def fake_hub(monkeypatch):
    """datasets.load_dataset replaced by an in-memory Dataset; records the calls."""
    calls: list[tuple[tuple, dict]] = []
    tables: dict[str, list[dict]] = {}

    def load_dataset(path, name=None, **kwargs):
        calls.append(((path, name), kwargs))
        if path not in tables:
            raise DatasetNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")
        return datasets.Dataset.from_list(tables[path])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return tables, calls


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- Hub datasets --------------------------------------------------------------------------------


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
    assert calls[0][0] == ("someone/sharegpt", None) and calls[0][1]["split"] == "train"


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
    monkeypatch.setattr(sources, "MAX_HUB_ROWS", 3)
    with pytest.raises(DataError, match=r"5 rows.*train\[:20000\]"):
        load_source("hub:someone/big", hub_split="train")


@pytest.mark.parametrize("kwargs,field", [({"dataset": "hub:alpaca"}, "dataset"), ({"dataset": "hub:../etc"}, "dataset"),
                                          ({"eval_dataset": "hub:a"}, "eval_dataset"), ({"hub_split": "train[:10"}, "hub_split"),
                                          ({"eval_split": "test; rm"}, "eval_split"), ({"hub_config": "../x"}, "hub_config"),
                                          ({"too_long": "cut"}, "too_long")])
def test_config_checks_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        TrainConfig(**kwargs)


def test_config_accepts_hub_refs_and_slices():
    cfg = TrainConfig(dataset=" hub:tatsu-lab/alpaca ", hub_split="train[:2000]", eval_dataset="hub:tatsu-lab/alpaca", eval_split="train[-200:]",
                      hub_config="default", columns=" text=body ", too_long="drop")
    assert cfg.dataset == "hub:tatsu-lab/alpaca" and cfg.columns == "text=body"
    for split in ("train", "train[:10%]", "train[10%:20%]", "train+test", "validation[100:200]"):
        TrainConfig(hub_split=split)


# ---- column mapping ------------------------------------------------------------------------------


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


# ---- training path: mapping, too_long and a separate eval set -------------------------------------


def _prepare(cfg, tokenizer, tmp_path, max_len=64):
    from engine.training.run import _prepare_data

    return _prepare_data(cfg, tokenizer, max_len, EventLog(tmp_path / "events.jsonl"))


def test_training_uses_mapping_too_long_and_eval_file(tokenizer, tmp_path):
    rows = [{"q": f"Pergunta número {i}?", "a": f"Resposta {i}."} for i in range(12)]
    rows[3]["a"] = "muito longa " * 80
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    eval_file = write_jsonl(tmp_path / "eval.jsonl", [{"q": "Oi?", "a": "Olá."}, {"q": "Tchau?", "a": "Até."}])
    base = dict(method="full", dataset=str(train_file), columns="instruction=q, output=a", eval_fraction=0.2)
    train, evals, report = _prepare(TrainConfig(**base, too_long="drop"), tokenizer, tmp_path)
    assert report["rows_kept"] == 11 and report["dropped"][0][0] == 4 and "longer than max_seq_len" in report["dropped"][0][1]
    assert len(train) + len(evals) == 11 and len(evals) == 2  # eval_fraction used
    train, evals, report = _prepare(TrainConfig(**base, too_long="truncate"), tokenizer, tmp_path)
    assert report["rows_kept"] == 12 and report["truncated"] == 1 and max(len(e["input_ids"]) for e in train) == 64
    train, evals, report = _prepare(TrainConfig(**base, eval_dataset=str(eval_file)), tokenizer, tmp_path)
    assert len(train) == 12 and len(evals) == 2 and "2 instruction rows from eval.jsonl" in report["eval_source"]
    assert all(any(x != -100 for x in e["labels"]) and e["labels"][0] == -100 for e in evals)  # masked like training
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[-1]["eval_examples"] == 2


def test_eval_from_the_hub_for_text_data_is_chunked(tokenizer, tmp_path, fake_hub):
    tables, calls = fake_hub
    tables["someone/corpus"] = [{"body": "Um parágrafo de teste sobre memória de GPU. " * 8}]
    cfg = TrainConfig(method="full", dataset="hub:someone/corpus", hub_split="train", eval_dataset="hub:someone/corpus", eval_split="test[:5]",
                      columns="text=body")
    train, evals, report = _prepare(cfg, tokenizer, tmp_path, max_len=32)
    assert report["eval_blocks"] == len(evals) >= 2 and all(len(e["input_ids"]) <= 32 for e in evals)
    assert [c[1]["split"] for c in calls] == ["train", "test[:5]"]


# ---- preview / report, browser checks, CLI --------------------------------------------------------


def test_inspect_honours_mapping_too_long_and_eval(tmp_path):
    from engine.data.preview import inspect_dataset

    rows = [{"pergunta": "Diga oi", "resposta": "Oi!"}, {"pergunta": "Longa", "resposta": "palavra " * 200}]
    path = write_jsonl(tmp_path / "pr.jsonl", rows)
    cfg = TrainConfig(method="full", dataset=str(path), columns="instruction=pergunta, output=resposta", too_long="drop", max_seq_len=32,
                      eval_dataset="builtin:instructions")
    # an empty runs dir: the tokenizer is trained the way a run on a not-yet-pretrained built-in does.
    # The eval set is a built-in sample in the standard columns: the mapping is not applied to it.
    ins = inspect_dataset(cfg, tmp_path / "runs")
    assert "Eval: **194 instruction rows from builtin:instructions" in ins.summary
    eval_path = write_jsonl(tmp_path / "ev.jsonl", rows[:1])
    import dataclasses

    ins = inspect_dataset(dataclasses.replace(cfg, eval_dataset=str(eval_path)), tmp_path / "runs")
    assert "1/2 rows kept" in ins.summary and "dropped at 32 tokens" in ins.summary and "Eval: **1 instruction rows from ev.jsonl" in ins.summary
    assert ins.dropped[0][0] == 2 and "longer than max_seq_len" in ins.dropped[0][1]
    assert ins.preview[1]["dropped"] and "⟦" in ins.preview[0]["text"]


def test_browser_checks_for_eval_dataset(tmp_path):
    uploads = tmp_path / "up"
    uploads.mkdir()
    check_ui_train_config(TrainConfig(dataset="hub:a/b", eval_dataset=str(uploads / "e.jsonl")), tmp_path, uploads)
    check_ui_train_config(TrainConfig(eval_dataset="hub:a/b"), tmp_path, uploads)
    with pytest.raises(ConfigError, match="eval_dataset"):
        check_ui_train_config(TrainConfig(eval_dataset="/etc/passwd"), tmp_path, uploads)


def test_cli_flags_come_from_the_dataclass(tmp_path, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path))
    assert main(["train", "--dataset", "hub:tatsu-lab/alpaca", "--hub-split", "train[:2000]", "--columns", "instruction=instruction, output=output",
                 "--too-long", "drop", "--eval-dataset", "builtin:instructions", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "hub_split: train[:2000]" in out and "too_long: drop" in out and "eval_dataset: builtin:instructions" in out


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


def test_local_model_folders_only_with_allow_local_models(tmp_path):
    from conftest import tiny_model_dir

    folder = str(tiny_model_dir())
    uploads = tmp_path / "up"
    uploads.mkdir()
    with pytest.raises(ConfigError, match="base_model|model"):
        check_ui_train_config(TrainConfig(base_model=folder), tmp_path, uploads)
    check_ui_train_config(TrainConfig(base_model=folder), tmp_path, uploads, allow_local_models=True)
    check_ui_train_config(TrainConfig(method="distill", teacher_model=folder), tmp_path, uploads, allow_local_models=True)
