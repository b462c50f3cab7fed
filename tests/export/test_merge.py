"""Tests for engine/export/merge.py: merging a LoRA/QLoRA adapter, and zipping a run (CPU, offline)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import CPU, logits, make_adapter_run, tiny_model_dir

from engine.errors import ModelLoadError
from engine.export.merge import merge_adapter, zip_run
from engine.models.loading import load_model
from engine.models.references import builtin_model_dir


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    return tiny_model_dir()


@pytest.fixture()
def runs(tmp_path, tiny_dir) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(tiny_dir, builtin_model_dir("compact-mini", runs))
    return runs


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_merged_model_gives_the_adapter_models_logits(runs, method):
    import bitsandbytes as bnb

    make_adapter_run(runs, name="r1", method=method)
    out = merge_adapter(runs / "r1", device=CPU)
    assert out == runs / "r1" / "merged"
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "merge_info.json"} <= files
    assert "adapter_config.json" not in files
    assert not list((runs / "r1").glob(".*tmp*"))  # nothing half-written left behind
    assert json.loads((out / "merge_info.json").read_text())["base_model"] == "builtin:compact-mini"

    merged = load_model(str(out), runs_dir=runs, device=CPU, allow_local_paths=True)
    assert not any(isinstance(m, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)) for m in merged.model.modules())
    # The reference: the adapter on the *unquantized* base (a QLoRA adapter is merged into 16/32-bit weights).
    from engine.config import QuantSettings

    adapter_model = load_model("run:r1", QuantSettings(mode="none"), runs_dir=runs, device=CPU)
    torch.testing.assert_close(logits(merged), logits(adapter_model), atol=1e-5, rtol=1e-5)
    base = load_model("builtin:compact-mini", runs_dir=runs, device=CPU)
    assert not torch.allclose(logits(merged), logits(base), atol=1e-3)  # the merge changed something

    # Merging again replaces the previous export atomically.
    assert merge_adapter(runs / "r1", device=CPU) == out and (out / "model.safetensors").exists()


def test_fp16_export_from_a_cpu(runs):
    make_adapter_run(runs, name="r2")
    out = merge_adapter(runs / "r2", runs / "r2" / "merged-fp16", dtype="fp16", device=CPU)
    config = json.loads((out / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "float16"
    fp32 = load_model(str(merge_adapter(runs / "r2", device=CPU)), runs_dir=runs, device=CPU, allow_local_paths=True)
    half = load_model(str(out), runs_dir=runs, device=CPU, allow_local_paths=True, dtype=torch.float32)
    torch.testing.assert_close(logits(half), logits(fp32), atol=5e-2, rtol=5e-2)


def test_merge_refuses_runs_without_an_adapter(runs, tiny_dir):
    shutil.copytree(tiny_dir, runs / "full" / "model")
    with pytest.raises(ModelLoadError, match="nothing to merge"):
        merge_adapter(runs / "full", device=CPU)
    (runs / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no LoRA adapter"):
        merge_adapter(runs / "empty", device=CPU)


def test_zip_run_contains_the_run_without_checkpoints_and_temp_files(runs):
    make_adapter_run(runs, name="r3")
    run = runs / "r3"
    (run / "events.jsonl").write_text('{"type": "done"}\n')
    (run / "checkpoint-5").mkdir()
    (run / "checkpoint-5" / "trainer_state.json").write_text("{}")
    (run / ".merged.tmp").mkdir()
    (run / ".merged.tmp" / "junk").write_text("x")
    (run / "pid").write_text("123 456")

    path = zip_run(run)
    assert path == runs / "_exports" / "r3.zip" and path.exists()
    names = set(zipfile.ZipFile(path).namelist())
    assert {
        "r3/config.yaml",
        "r3/events.jsonl",
        "r3/adapter/adapter_config.json",
        "r3/adapter/adapter_model.safetensors",
    } <= names
    assert not any("checkpoint-" in n or ".merged.tmp" in n or n == "r3/pid" for n in names)
    assert not list(path.parent.glob(".*"))  # the temp file was renamed, not left over

    with_ckpt = set(zipfile.ZipFile(zip_run(run, include_checkpoints=True)).namelist())
    assert "r3/checkpoint-5/trainer_state.json" in with_ckpt
    assert zipfile.ZipFile(path).testzip() is None
