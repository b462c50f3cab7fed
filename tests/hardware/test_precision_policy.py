"""The dtype policy per device and model family (presets/precision.yaml), with mocked device properties: a Colab T4
(7.5, 15 GB, no bf16), an RTX 3060 (8.6, 12 GB), an A100 (8.0, 40 GB) and a CPU. The form, the recipes and the
estimator query must pick the same precision the run will."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from engine.config import TrainConfig
from engine.errors import ConfigError
from engine.hardware import device as device_mod
from engine.hardware.device import PRECISION_FILE, DeviceInfo, Fp16Rule, fp16_rule, fp16_rules, resolve_dtype
from engine.models.references import architecture_ref, model_type_of

T4 = DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5))
RTX3060 = DeviceInfo("cuda", "NVIDIA GeForce RTX 3060", 11.76, True, (8, 6))
A100 = DeviceInfo("cuda", "NVIDIA A100-SXM4-40GB", 39.39, True, (8, 0))
CPU = DeviceInfo("cpu", "x86 CPU", 16.0, True, None)


# ---- one test per decision: auto on each device, for a safe family and an fp16-unsafe one ----

@pytest.mark.parametrize(("device", "expected"), [(T4, torch.float16), (RTX3060, torch.bfloat16), (A100, torch.bfloat16), (CPU, torch.float32)])
def test_auto_for_a_safe_family(device, expected):
    assert resolve_dtype("auto", device, model_type="llama") == expected
    assert resolve_dtype("auto", device) == expected  # unknown model: no family rule


@pytest.mark.parametrize(("device", "expected"), [(T4, torch.float32), (RTX3060, torch.bfloat16), (A100, torch.bfloat16), (CPU, torch.float32)])
@pytest.mark.parametrize("model_type", ["gemma", "gemma2", "gemma3_text", "t5", "mt5"])
def test_auto_for_an_fp16_unsafe_family(device, expected, model_type):
    assert resolve_dtype("auto", device, model_type=model_type) == expected


def test_explicit_fp16_for_gemma_on_a_t4_is_refused_with_advice():
    with pytest.raises(ConfigError) as err:
        resolve_dtype("fp16", T4, field="precision", model_type="gemma2")
    msg = str(err.value)
    assert err.value.field == "precision" and "fp32 or auto" in msg and "Gemma" in msg and "https://" in msg


@pytest.mark.parametrize("device", [RTX3060, A100])
def test_explicit_fp16_for_gemma_on_a_bf16_gpu_points_to_bf16(device):
    with pytest.raises(ConfigError, match="bf16 or fp32 for Gemma"):
        resolve_dtype("fp16", device, model_type="gemma")


def test_explicit_fp16_for_a_safe_family_on_a_t4_is_kept():
    assert resolve_dtype("fp16", T4, model_type="llama") == torch.float16


def test_bf16_on_a_t4_says_what_auto_picks_for_the_family():
    with pytest.raises(ConfigError, match="auto picks fp32 for this model family"):
        resolve_dtype("bf16", T4, model_type="gemma2")
    with pytest.raises(ConfigError, match="auto picks fp16 here"):
        resolve_dtype("bf16", T4, model_type="qwen2")


def test_fp16_on_cpu_is_refused_for_every_family():
    for model_type in ("llama", "gemma2"):
        with pytest.raises(ConfigError, match="on CPU"):
            resolve_dtype("fp16", CPU, model_type=model_type)


def test_refuse_policy_refuses_auto_without_bf16(monkeypatch):
    rule = Fp16Rule("Fragile", ("fragile",), "refuse", "it overflows", ("https://example.org/issue",))
    monkeypatch.setattr(device_mod, "fp16_rules", lambda: (rule,))
    with pytest.raises(ConfigError, match="a GPU with bf16"):
        resolve_dtype("auto", T4, model_type="fragile")
    assert resolve_dtype("auto", A100, model_type="fragile") == torch.bfloat16
    assert resolve_dtype("fp32", T4, model_type="fragile") == torch.float32


# ---- the data ----

def test_every_family_has_a_policy_and_a_source_link():
    data = yaml.safe_load(PRECISION_FILE.read_text(encoding="utf-8"))
    assert len(fp16_rules()) == len(data["families"]) >= 4
    seen: set[str] = set()
    for rule in fp16_rules():
        assert rule.policy in ("fp32", "refuse") and rule.why
        assert rule.source and all(s.startswith("https://") for s in rule.source)
        assert not seen & set(rule.model_types), "a model_type in two families"
        seen |= set(rule.model_types)
    for required in ("gemma", "gemma2", "gemma3", "t5", "mt5"):
        assert fp16_rule(required) is not None
    assert fp16_rule("llama") is None and fp16_rule(None) is None


# ---- model_type discovery: folders, runs, runs of runs ----

def _folder(tmp_path, name: str, model_type: str):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    return folder


def test_model_type_of_a_folder_and_of_a_run(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    base = _folder(tmp_path, "gemma-base", "gemma2")
    assert model_type_of(str(base), runs) == "gemma2"
    run = runs / "lora-g"
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter_config.json").write_text("{}", encoding="utf-8")
    (run / "config.yaml").write_text(f"method: lora\nbase_model: {base}\n", encoding="utf-8")
    assert model_type_of("run:lora-g", runs) == "gemma2"
    assert architecture_ref("run:lora-g", runs) == str(base / "config.json")
    (runs / "lora-h").mkdir()
    (runs / "lora-h" / "config.yaml").write_text("method: lora\nbase_model: run:lora-g\n", encoding="utf-8")
    assert architecture_ref("run:lora-h/merged", runs) == str(base / "config.json")
    assert model_type_of("no/such-model-offline", runs) is None  # unknown: no rule, the load reports the problem


# ---- the form, the recipe and the estimator agree ----

def _spy_queries(monkeypatch) -> list[str]:
    from engine.estimator import handoff

    seen: list[str] = []
    real = handoff.query_from_train

    def spy(cfg, dtype, model=None, **kw):
        seen.append(dtype)
        return real(cfg, dtype, model, **kw)

    monkeypatch.setattr(handoff, "query_from_train", spy)
    return seen


@pytest.mark.parametrize(("device", "expected"), [(T4, "fp32"), (RTX3060, "bf16"), (A100, "bf16"), (CPU, "fp32")])
def test_form_prediction_uses_the_family_rule(monkeypatch, tmp_path, device, expected):
    monkeypatch.setattr(device_mod, "detect_device", lambda: device)
    seen = _spy_queries(monkeypatch)
    from engine.views.finetune_form import memory_prediction

    cfg = TrainConfig(method="qlora", base_model="gemma-2b", dataset="builtin:dates")
    text, verdict = memory_prediction(cfg, tmp_path)
    assert seen == [expected] and verdict in ("fits", "tight", "no") and device.name in text


def test_form_prediction_keeps_fp16_for_llama_on_a_t4(monkeypatch, tmp_path):
    monkeypatch.setattr(device_mod, "detect_device", lambda: T4)
    seen = _spy_queries(monkeypatch)
    from engine.views.finetune_form import memory_prediction

    memory_prediction(TrainConfig(method="qlora", base_model="llama-3.2-1b", dataset="builtin:dates"), tmp_path)
    assert seen == ["fp16"]


def test_form_refuses_explicit_fp16_for_gemma_on_a_t4(monkeypatch, tmp_path):
    monkeypatch.setattr(device_mod, "detect_device", lambda: T4)
    from engine.views.finetune_form import memory_prediction, prediction_or_warning

    cfg = TrainConfig(method="qlora", base_model="gemma-2b", dataset="builtin:dates", precision="fp16")
    with pytest.raises(ConfigError, match="precision = 'fp16'"):
        memory_prediction(cfg, tmp_path)
    assert prediction_or_warning(lambda: cfg, tmp_path).startswith("⚠ precision = 'fp16'")


@pytest.mark.parametrize(("tier", "model", "expected"), [
    ("t4-16gb", "gemma-2b", "fp32"), ("t4-16gb", "llama-3.2-1b", "fp16"),
    ("gpu-12gb", "gemma-2b", "bf16"), ("a100-40gb", "gemma-2b", "bf16"), ("cpu-16gb", "gemma-2b", "auto"),
])
def test_hardware_preset_picks_the_same_precision(tier, model, expected):
    from engine.estimator.recipes import apply_recipe

    applied = apply_recipe({"method": "qlora", "dataset": "builtin:dates", "precision": "auto"}, tier, model)
    assert applied.values["precision"] == expected
    if expected == "fp32" and tier.startswith("t4"):
        assert any("overflows in fp16" in c for c in applied.changes)


def test_the_form_says_why_auto_picks_fp32_for_an_unsafe_family(monkeypatch, tmp_path):
    from engine.hardware.device import precision_reason
    from engine.views.finetune_form import memory_prediction

    assert precision_reason(T4, "llama").startswith("auto picks fp16 mixed precision")
    assert precision_reason(A100, "gemma").startswith("auto picks bf16")
    monkeypatch.setattr(device_mod, "detect_device", lambda: T4)
    text, _ = memory_prediction(TrainConfig(method="qlora", base_model="gemma-2b", dataset="builtin:dates"), tmp_path)
    assert "precision **fp32** (auto picks fp32: " in text and "overflows in fp16" in text
