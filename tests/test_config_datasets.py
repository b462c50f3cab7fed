"""The dataset fields of TrainConfig, checked with the grammar in engine/refs.py (hub:owner/name, split, config, the
column mapping syntax) as TrainConfig, the browser-path checks and the CLI use it."""

from __future__ import annotations

import pytest

from engine.config import TrainConfig
from engine.errors import ConfigError
from engine.estimator.handoff import check_ui_train_config

# ---- Hub references, splits and configs ----------------------------------------------------------


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




# ---- browser checks, CLI --------------------------------------------------------------------------


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


def test_local_model_folders_only_with_allow_local_models(tmp_path):
    from conftest import tiny_model_dir

    folder = str(tiny_model_dir())
    uploads = tmp_path / "up"
    uploads.mkdir()
    with pytest.raises(ConfigError, match="base_model|model"):
        check_ui_train_config(TrainConfig(base_model=folder), tmp_path, uploads)
    check_ui_train_config(TrainConfig(base_model=folder), tmp_path, uploads, allow_local_models=True)
    check_ui_train_config(TrainConfig(method="distill", teacher_model=folder), tmp_path, uploads, allow_local_models=True)
