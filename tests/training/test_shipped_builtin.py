"""The built-in model shipped pretrained (presets/models/compact-mini): it loads offline on the CPU and reaches its
recorded eval loss, a run on it starts at once (no pretraining), a rebuilt copy in the runs folder wins over it, and
nothing at runtime writes into presets/."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open

from engine.config import TrainConfig
from engine.hardware.device import DeviceInfo
from engine.models.references import builtin_model_dir, builtin_weights_dir, shipped_model_dir
from engine.runs import read_events
from engine.training.builtin import ensure_builtin
from engine.training.ship import builtin_eval_loss, read_record

CPU = DeviceInfo("cpu", "x86 CPU", 16.0, True, None)
SHIPPED = shipped_model_dir("compact-mini")


def _tree(folder):
    return sorted((p.relative_to(folder).as_posix(), p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_the_shipped_model_loads_offline_and_reaches_its_recorded_eval_loss(tmp_path):
    from engine.models.loading import load_model

    record = read_record(SHIPPED)
    assert record["made_by"].startswith("python -m engine prepare-builtin compact-mini --ship")
    assert record["steps"] == record["recipe"]["max_steps"] and record["stored_precision"] == "fp16"
    weights = SHIPPED / "model.safetensors"
    assert weights.stat().st_size < 6 * 2**20  # a few MB: 16-bit weights
    with safe_open(str(weights), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}
    loaded = load_model("builtin:compact-mini", runs_dir=tmp_path / "runs", device=CPU)  # an empty runs folder
    assert loaded.where.startswith("built-in compact-mini") and loaded.config_path == SHIPPED / "config.json"
    assert loaded.dtype == torch.float32 and loaded.tokenizer.chat_template and loaded.tokenizer.padding_side == "left"
    loss, blocks = builtin_eval_loss(SHIPPED, "compact-mini")
    assert blocks == record["eval_blocks"]
    assert abs(loss - record["eval_loss"]) < 2e-3, (loss, record["eval_loss"])
    # the stored precision was chosen by the numbers: fp16 reads back to the fp32 loss
    by_precision = record["eval_loss_by_stored_precision"]
    assert abs(by_precision["fp16"] - by_precision["fp32"]) < 1e-3


def test_a_run_on_the_shipped_model_does_not_pretrain(tmp_path):
    from engine.training.run import run_training

    runs, before = tmp_path / "runs", _tree(SHIPPED)
    cfg = TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:instructions", run_name="t-shipped",
                      max_steps=2, micro_batch_size=2, max_seq_len=64, logging_steps=1, save_steps=100, eval_fraction=0.0)
    done = run_training(cfg, runs / cfg.run_name, runs_dir=runs)
    assert done["type"] == "done" and done["steps"] == 2
    assert not (runs / "_builtin").exists()  # no pretraining run folder
    events = read_events(runs / cfg.run_name)
    assert not [e for e in events if e["type"].startswith("base_") or "pretraining" in e.get("phase", "")]
    assert _tree(SHIPPED) == before  # nothing written into presets/


def test_a_rebuilt_copy_in_the_runs_folder_wins_over_the_shipped_one(tmp_path):
    runs, calls = tmp_path / "runs", []

    def fake_pretrain(cfg, run_dir, *, runs_dir, resume, mirror):
        calls.append((cfg.base_model, run_dir, resume))
        (run_dir / "model").mkdir(parents=True)
        (run_dir / "model" / "config.json").write_text(json.dumps({"model_type": "compact_llm"}))
        return {"type": "done"}

    assert ensure_builtin("compact-mini", runs, pretrain=fake_pretrain) == SHIPPED and not calls  # shipped: used as it is
    (runs / "_builtin" / "compact-mini" / "checkpoint-200").mkdir(parents=True)  # an older pretraining's leftovers
    rebuilt = ensure_builtin("compact-mini", runs, pretrain=fake_pretrain, rebuild=True)
    assert rebuilt == builtin_model_dir("compact-mini", runs) and calls == [("builtin:compact-mini", rebuilt.parent, False)]
    assert not (rebuilt.parent / "checkpoint-200").exists()  # a rebuild starts afresh
    assert builtin_weights_dir("compact-mini", runs) == rebuilt  # and from then on every run loads it
    assert ensure_builtin("compact-mini", runs, pretrain=fake_pretrain) == rebuilt and len(calls) == 1
    # a preset that is not shipped is pretrained on first use, into the runs folder
    assert builtin_weights_dir("compact-course", runs) is None
    assert ensure_builtin("compact-course", runs, pretrain=fake_pretrain) == builtin_model_dir("compact-course", runs)


def test_prepare_builtin_rebuild_and_ship_flags(monkeypatch, tmp_path):
    from engine import cli
    from engine.training import builtin

    seen = {}
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(builtin, "ensure_builtin", lambda preset, runs_dir, **kw: seen.update(preset=preset, **kw) or tmp_path)
    assert cli.main(["prepare-builtin", "compact-course", "--rebuild"]) == 0
    assert seen["preset"] == "compact-course" and seen["rebuild"] is True
    args = cli.build_parser().parse_args(["prepare-builtin", "--ship"])
    assert args.preset == "compact-mini" and args.ship and args.store == "fp16"


def test_a_preset_not_pretrained_says_how_in_the_visitors_language(tmp_path):
    import pytest

    from engine.errors import ModelLoadError
    from engine.models.references import resolve_model

    with pytest.raises(ModelLoadError) as info:
        resolve_model("builtin:compact-course", tmp_path, False)
    assert "prepare-builtin compact-course" in info.value.render("en")
    assert "ainda não foi pré-treinado" in info.value.render("pt-BR")


def test_the_playground_offers_the_shipped_model_before_any_run(tmp_path):
    from types import SimpleNamespace

    from engine.views.choices import playground_models

    models = playground_models(SimpleNamespace(runs_dir=tmp_path, finished_runs=lambda: []))
    assert "builtin:compact-mini" in models and "builtin:compact-course" not in models  # only what can be loaded
