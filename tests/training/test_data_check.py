"""Tests of engine/training/data_check.py: the data check before a run, with the tokenizer the run will use."""

from __future__ import annotations

import dataclasses

from conftest import write_jsonl

from engine.config import TrainConfig


def test_inspect_honours_mapping_too_long_and_eval(tmp_path):
    from engine.training.data_check import inspect_dataset

    rows = [{"pergunta": "Diga oi", "resposta": "Oi!"}, {"pergunta": "Longa", "resposta": "palavra " * 200}]
    path = write_jsonl(tmp_path / "pr.jsonl", rows)
    cfg = TrainConfig(method="full", dataset=str(path), columns="instruction=pergunta, output=resposta", too_long="drop", max_seq_len=32,
                      eval_dataset="builtin:instructions")
    # an empty runs dir: the base (builtin:compact-mini) is the shipped pretrained copy, with its own tokenizer.
    # The eval set is a built-in sample in the standard columns: the mapping is not applied to it.
    ins = inspect_dataset(cfg, tmp_path / "runs")
    assert "Eval: **194 instruction rows from builtin:instructions" in ins.summary
    eval_path = write_jsonl(tmp_path / "ev.jsonl", rows[:1])

    ins = inspect_dataset(dataclasses.replace(cfg, eval_dataset=str(eval_path)), tmp_path / "runs")
    assert "1/2 rows kept" in ins.summary and "dropped at 32 tokens" in ins.summary and "Eval: **1 instruction rows from ev.jsonl" in ins.summary
    assert ins.dropped[0][0] == 2 and "longer than max_seq_len" in ins.dropped[0][1]
    assert ins.preview[1]["dropped"] and "⟦" in ins.preview[0]["text"]


def test_the_report_in_portuguese(tmp_path):
    from engine.training.data_check import inspect_dataset

    rows = [{"instruction": "Diga oi", "output": "Oi!"}, {"instruction": "Longa", "output": "palavra " * 200}]
    cfg = TrainConfig(method="full", dataset=str(write_jsonl(tmp_path / "d.jsonl", rows)), too_long="drop", max_seq_len=32, eval_fraction=0.1)
    ins = inspect_dataset(cfg, tmp_path / "runs", lang="pt-BR")
    assert "Formato **instruction** de d.jsonl · 1/2 linhas mantidas" in ins.summary and "descartadas em 32 tokens" in ins.summary
    assert "loss sobre só as respostas" in ins.summary and "tokenizador de builtin:compact-mini" in ins.summary
    assert "passos por época" in ins.summary and "Avaliação: 10% das linhas separadas." in ins.summary


def test_the_check_names_unused_columns_and_the_split_in_the_visitors_language(tmp_path):
    """The "Check the data" button on a Dolly-style file and on HH-style pairs: every column used or named, in Portuguese."""
    import pytest

    from engine.errors import DataError
    from engine.training.data_check import inspect_dataset

    dolly = write_jsonl(tmp_path / "dolly.jsonl", [{"instruction": "Quando?", "context": "Fundado em 1902.", "response": "Em 1902.", "category": "qa"}] * 3)
    ins = inspect_dataset(TrainConfig(method="full", dataset=str(dolly), eval_fraction=0.0), tmp_path / "runs", lang="pt-BR")
    assert "Colunas não usadas: 'category'" in ins.summary and "input=category" in ins.summary
    assert "Fundado em 1902." in ins.preview[0]["text"] and "⟦Em 1902." in ins.preview[0]["text"]
    hh = [{"chosen": f"\n\nHuman: Capital {i}?\n\nAssistant: Lisboa.", "rejected": f"\n\nHuman: Capital {i}?\n\nAssistant: Porto."} for i in range(3)]
    cfg = TrainConfig(method="dpo", dataset=str(write_jsonl(tmp_path / "hh.jsonl", hh)), max_seq_len=128)
    ins = inspect_dataset(cfg, tmp_path / "runs", lang="pt-BR")
    assert "3 pares não têm coluna 'prompt'" in ins.summary and "Capital 0?" in ins.summary and "✓ Lisboa." in ins.preview[0]["text"]
    labelled = write_jsonl(tmp_path / "fb.jsonl", [{"prompt": "q", "completion": "a", "label": i % 2 == 0} for i in range(4)])
    with pytest.raises(DataError) as err:  # SFT on thumbs-up/down data: refused, the label column named, KTO offered
        inspect_dataset(TrainConfig(method="full", dataset=str(labelled)), tmp_path / "runs", lang="pt-BR")
    assert "'label'" in err.value.render("pt-BR") and "kto" in err.value.render("pt-BR")
    ins = inspect_dataset(TrainConfig(method="kto", dataset=str(labelled), max_seq_len=64), tmp_path / "runs", lang="pt-BR")
    assert "4 respostas rotuladas" in ins.summary and "✖" in ins.preview[1]["text"]
