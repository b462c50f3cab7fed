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
