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
