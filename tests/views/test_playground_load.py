"""Loading for the ONNX export and unloading, without gradio and without a real model (the cache is faked)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import engine.views.playground_load as playground_load
from engine.errors import EngineError
from engine.models.cache import MODEL_CACHE


def test_export_loads_the_checked_reference_unquantized_and_refuses_an_adapter(monkeypatch):
    calls = []
    monkeypatch.setattr(playground_load, "check_ui_model_ref", lambda ref, runs_dir, allow_local=False: calls.append(("check", ref, allow_local)) or f"checked:{ref}")
    monkeypatch.setattr(playground_load, "check_reachable", lambda ref, adapter, runs_dir, allow_local: False)

    def get_or_load(ref, quant, **kw):
        calls.append(("load", ref, quant.mode, kw))
        return SimpleNamespace(adapter="run:lora" if "lora" in ref else None)

    monkeypatch.setattr(MODEL_CACHE, "get_or_load", get_or_load)
    jobs = SimpleNamespace(runs_dir=Path("/runs"))
    ref, loaded = playground_load.load_for_export(jobs, "builtin:compact-mini", allow_local_models=True)
    assert ref == "checked:builtin:compact-mini" and loaded.adapter is None
    assert calls == [("check", "builtin:compact-mini", True),
                     ("load", "checked:builtin:compact-mini", "none", {"runs_dir": Path("/runs"), "allow_local_paths": True})]
    with pytest.raises(EngineError, match=r"This run is a LoRA adapter: merge it first \(Fine-tune → Merge adapter\)"):
        playground_load.load_for_export(jobs, "run:lora")


def test_unload_models_says_how_many(monkeypatch):
    monkeypatch.setattr(MODEL_CACHE, "unload_all", lambda: 2)
    assert playground_load.unload_models() == 2


# ---- the "fits beside a training run" guard resolves run:NAME to its base (it used to count 0 GiB) ----

def _guarded(monkeypatch, tmp_path, free_gib: float):
    import yaml

    from engine.hardware import coexist
    from engine.hardware import device as device_mod
    from engine.hardware.device import DeviceInfo

    run = tmp_path / "big-qlora"
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter_config.json").write_text("{}", encoding="utf-8")
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "qlora", "base_model": "llama-3.2-3b"}), encoding="utf-8")
    monkeypatch.setattr(coexist, "cuda_free_gib", lambda: free_gib)
    monkeypatch.setattr(device_mod, "detect_device", lambda: DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5)))
    monkeypatch.setattr(MODEL_CACHE, "loaded", lambda: [])
    monkeypatch.setattr(playground_load, "check_reachable", lambda *a: False)  # its 3B base is a Hub model, not downloaded here
    loads = []
    monkeypatch.setattr(MODEL_CACHE, "get_or_load", lambda ref, quant, **kw: loads.append((ref, quant.mode)) or SimpleNamespace())
    return SimpleNamespace(runs_dir=tmp_path, active=lambda: "training-now"), loads


def test_a_run_counts_as_its_base_architecture(monkeypatch, tmp_path):
    from engine.hardware import device as device_mod
    from engine.hardware.device import DeviceInfo
    from engine.views.playground_load import weights_gib

    monkeypatch.setattr(device_mod, "detect_device", lambda: DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5)))

    runs = tmp_path
    run = runs / "r"
    run.mkdir()
    (run / "config.yaml").write_text("method: lora\nbase_model: llama-3.2-3b\n", encoding="utf-8")
    sixteen, four = weights_gib("run:r", "none", runs), weights_gib("run:r", "4bit", runs)
    assert sixteen == pytest.approx(weights_gib("llama-3.2-3b", "none", runs)) and 5.5 < sixteen < 7.5
    assert 1.5 < four < 3.0 and weights_gib("run:r/merged", "none", runs) == pytest.approx(sixteen)
    (run / "config.yaml").write_text("method: lora\nbase_model: gemma-2b\n", encoding="utf-8")
    # Gemma computes in fp32 on a T4 (presets/precision.yaml): its weights are counted at 4 bytes
    assert weights_gib("run:r", "none", runs) > 9.0  # 2.5B parameters x 4 bytes


def test_playground_refuses_a_run_that_would_not_fit_beside_training(monkeypatch, tmp_path):
    from engine.errors import GenerationError

    jobs, loads = _guarded(monkeypatch, tmp_path, free_gib=4.0)
    with pytest.raises(GenerationError, match="training-now.*needs about"):
        playground_load.load_for_playground(jobs, "run:big-qlora", "none")  # its 3B base unquantized: ~6.4 GiB
    assert loads == []
    playground_load.load_for_playground(jobs, "run:big-qlora", "4bit")  # ~2 GiB in 4-bit fits in 4 GiB free
    assert loads == [("run:big-qlora", "4bit")]
