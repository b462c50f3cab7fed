"""Hardware presets of the fine-tune form: a tier's recipe adapted to the chosen model by the estimator (engine/estimator/recipes.py),
and the form's "Apply preset" through the app API."""

from __future__ import annotations

import shlex

import pytest
from conftest import running_app

from engine.config import TrainConfig
from engine.errors import ConfigError
from engine.estimator import memory
from engine.estimator.catalog import tier_by_name
from engine.estimator.handoff import query_from_train
from engine.estimator.recipes import AUTO, apply_recipe, tier_choices, tier_for_device
from engine.fields import field_specs, from_flat
from engine.hardware.device import DeviceInfo

TIERS = [name for _, name in tier_choices() if name != AUTO]
MODELS = ["builtin:compact-mini", "qwen2.5-0.5b", "llama-3.1-8b"]
# 8B models do not fit 4-8 GB cards with the HF stack at all (presets/recipes.yaml says why): the preset must say so
TOO_BIG = {("gpu-4gb", "llama-3.1-8b"), ("gpu-6gb", "llama-3.1-8b"), ("gpu-8gb", "llama-3.1-8b")}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("tier", TIERS)
def test_preset_fits_its_tier_for_the_model(tier, model):
    applied = apply_recipe({}, tier, model)
    values = applied.values
    cfg = from_flat(TrainConfig, values)  # the values are a valid form/config as they are
    assert cfg.base_model == model and applied.tier == tier
    t = tier_by_name(tier)
    if not t.bf16:  # T4, older GPUs, CPUs: never bf16
        assert cfg.precision != "bf16" and cfg.quant.compute_dtype != "bf16"
    if t.kind == "cpu":  # decided where the run trains (bf16 where that CPU is fast at it), estimated as fp32
        assert cfg.precision == "auto"
    # the estimator, asked independently about the config the form now holds, agrees with the verdict
    verdict = memory.estimate(query_from_train(cfg, "fp32" if cfg.precision == "auto" else cfg.precision)).tiers[tier]
    assert verdict == applied.verdict
    if (tier, model) in TOO_BIG:
        assert verdict == "no" and "does not fit" in applied.explanation and cfg.method == "qlora"
    else:
        assert verdict in ("fits", "tight"), applied.explanation
    assert f"{applied.need_gib:.2f} GiB" in applied.explanation


def test_preset_adapts_to_the_model():
    small = apply_recipe({}, "t4-16gb", "qwen2.5-0.5b")  # the T4 recipe is QLoRA of an 8B model
    assert small.values["method"] == "lora" and small.values["precision"] == "fp16" and small.values["quant.mode"] == "none"
    assert small.values["micro_batch_size"] > 1 and small.values["micro_batch_size"] * small.values["grad_accum"] == 16
    big = apply_recipe({}, "t4-16gb", "llama-3.1-8b")
    assert big.values["method"] == "qlora" and big.values["quant.mode"] == "4bit" and big.values["quant.compute_dtype"] == "fp16"
    cpu = apply_recipe({"precision": "bf16"}, "cpu-16gb", "llama-3.1-8b")  # 32 GB of fp32 weights: QLoRA it is
    assert cpu.values["method"] == "qlora" and cpu.values["precision"] == "auto" and cpu.verdict in ("fits", "tight")
    tiny = apply_recipe({}, "gpu-8gb", "builtin:compact-mini")
    assert tiny.values["max_seq_len"] <= 256  # capped at the built-in model's context


def test_preset_is_deterministic_and_keeps_other_fields():
    form = {"dataset": "builtin:instructions", "learning_rate": 5e-4, "run_name": "mine", "max_steps": 7}
    a = apply_recipe(form, "gpu-12gb", "qwen2.5-0.5b")
    b = apply_recipe(form, "gpu-12gb", "qwen2.5-0.5b")
    assert a == b
    assert a.values["dataset"] == "builtin:instructions" and a.values["learning_rate"] == 5e-4 and a.values["run_name"] == "mine"


def test_unknown_model_keeps_the_recipe_with_a_note():
    applied = apply_recipe({}, "t4-16gb", "someone/not-in-the-catalog")  # offline: no config.json to fetch
    assert applied.verdict is None and "unknown to the memory estimator" in applied.explanation
    assert applied.values["method"] == "qlora" and applied.values["precision"] == "fp16"


def test_unknown_tier_is_a_config_error():
    with pytest.raises(ConfigError, match="tier"):
        apply_recipe({}, "gpu-1tb", "qwen2.5-0.5b")


@pytest.mark.parametrize("device,tier", [
    (DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5)), "t4-16gb"),
    (DeviceInfo("cuda", "NVIDIA GeForce RTX 3090", 23.57, True, (8, 6)), "gpu-24gb"),
    (DeviceInfo("cuda", "NVIDIA A10G", 22.49, True, (8, 6)), "a10g-24gb"),
    (DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 79.19, True, (9, 0)), "gpu-80gb"),
    (DeviceInfo("cuda", "NVIDIA GeForce GTX 1650", 3.81, False, (7, 5)), "gpu-4gb"),
    (DeviceInfo("cuda", "NVIDIA GeForce RTX 2070", 7.79, False, (7, 5)), "gpu-6gb"),  # 8 GB but no bf16
    (DeviceInfo("cpu", "Intel Xeon", 7.7, True), "cpu-16gb"),
    (DeviceInfo("cpu", "Intel Xeon", 31.3, True), "cpu-32gb"),
])
def test_tier_for_device(device, tier):
    assert tier_for_device(device) == tier


# --------------------------------------------------------------------------------------------------
# Through the app
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(runs_dir):
    pytest.importorskip("gradio")
    from gradio_client import Client

    with running_app(runs_dir) as demo:
        yield Client(demo.local_url, verbose=False)


def _form(overrides=None):
    from engine.views.finetune_form import FT_DATA, FT_DEFAULTS, FT_LORA, FT_MAIN, FT_RUN, FT_TRAIN

    names = FT_MAIN + FT_TRAIN + FT_LORA + FT_RUN + FT_DATA
    values = {**{s.name: s.default for s in field_specs(TrainConfig)}, **FT_DEFAULTS, **(overrides or {})}
    return names, [values[n] for n in names] + [None]  # the eval-file upload comes last


def test_apply_preset_through_the_app(client):
    names, values = _form({"base_model": "qwen2.5-0.5b"})
    out = client.predict("t4-16gb", None, *values, api_name="/apply_preset")
    note, *fields = out
    got = dict(zip(names, [f["value"] if isinstance(f, dict) and "value" in f else f for f in fields], strict=True))
    assert "Colab T4" in note and "GiB" in note
    assert got["precision"] == "fp16" and got["method"] == "lora" and got["base_model"] == "qwen2.5-0.5b"
    assert got["micro_batch_size"] * got["grad_accum"] == 16 and got["grad_checkpointing"] is True
    # this machine (a CPU here): the preset leaves precision on auto (bf16 or fp32 by this CPU's speed), never fp16
    note, *fields = client.predict(AUTO, None, *_form()[1], api_name="/apply_preset")
    got = dict(zip(names, [f["value"] if isinstance(f, dict) and "value" in f else f for f in fields], strict=True))
    assert "This machine" in note
    import torch

    if not torch.cuda.is_available():
        assert got["precision"] == "auto"
        # and the prediction for the filled form is a fit, not an error
        values = [got[n] for n in names] + [None]
        text = client.predict(None, *values, api_name="/predict_memory")
        assert "Predicted peak" in text and "fits" in text


def test_show_command_gives_the_launch_command(client):
    from engine.hardware.distributed import launch_command

    text = client.predict(None, *_form()[1], api_name="/show_command")
    value = text["value"] if isinstance(text, dict) else text
    line = next(ln for ln in value.splitlines() if "accelerate launch" in ln)
    assert line.lstrip("# ").strip() == launch_command("run.yaml", 2)
    argv = shlex.split(line.lstrip("# "))
    assert argv[:3] == ["accelerate", "launch", "--multi_gpu"] and argv[argv.index("-m") + 1:argv.index("-m") + 3] == ["engine", "train"]
