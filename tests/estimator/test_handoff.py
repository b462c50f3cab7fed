"""Estimator -> fine-tune form mapping, and the browser-input path checks."""

import pytest

from engine.config import MemoryQuery, TrainConfig
from engine.errors import ConfigError
from engine.estimator.handoff import check_ui_model_ref, check_ui_train_config, train_values_from_query
from engine.fields import from_flat


def test_query_maps_to_valid_train_config():
    q = MemoryQuery(model="builtin:compact-mini", task="qlora", weight_precision="nf4", batch=2, grad_accum=4, seq_len=512,
                    grad_ckpt=True, optimizer="paged-adamw-8bit", lora_r=8, lora_targets="q,v")
    values = train_values_from_query(q)
    cfg = from_flat(TrainConfig, values)
    assert cfg.method == "qlora" and cfg.micro_batch_size == 2 and cfg.grad_accum == 4 and cfg.max_seq_len == 512
    assert cfg.grad_checkpointing and cfg.optimizer == "paged-adamw-8bit" and cfg.lora.targets == "q_proj,v_proj"


@pytest.mark.parametrize("ref", ["builtin:compact-mini", "run:lora-1", "gpt2", "Qwen/Qwen2.5-0.5B"])
def test_good_refs(ref, tmp_path):
    assert check_ui_model_ref(ref, tmp_path) == ref


@pytest.mark.parametrize("ref", ["/etc/passwd", "../runs", "~/models", "run:../x", "a/b/c", "C:\\models", "./local"])
def test_server_paths_are_refused(ref, tmp_path):
    with pytest.raises(ConfigError):
        check_ui_model_ref(ref, tmp_path)


def test_dataset_must_be_builtin_or_upload(tmp_path):
    uploads = tmp_path / "_uploads"
    uploads.mkdir()
    check_ui_train_config(TrainConfig(dataset="builtin:dates"), tmp_path, uploads)
    check_ui_train_config(TrainConfig(dataset=str(uploads / "x.jsonl")), tmp_path, uploads)
    with pytest.raises(ConfigError, match="dataset"):
        check_ui_train_config(TrainConfig(dataset="/etc/passwd"), tmp_path, uploads)
