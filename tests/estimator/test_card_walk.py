"""A plan is for a card (issue 32): for every hardware tier, the estimator's settings on that card, handed to the Fine-tune
form, are accepted by Start on a stand-in device of that tier (torch.cuda's device properties mocked as the other
device tests do), and the form's prediction names that card beside this machine's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.config import MemoryQuery, TrainConfig
from engine.errors import ConfigError
from engine.estimator import memory
from engine.estimator.catalog import method_learning_rate, tier_by_name
from engine.estimator.handoff import card_precision, card_training_precision, train_values_for_card
from engine.fields import from_flat
from engine.hardware.device import DeviceInfo, resolve_dtype
from engine.training.jobs import JobManager
from engine.views import estimate_view, finetune_form

TIERS = [t.name for t in memory.hardware_tiers()]


def stand_in(monkeypatch, tier_name: str) -> None:
    """This process sees a device of the tier: a CUDA card with the tier's memory and bf16 support (compute capability
    8.0 with bf16, 7.5 a T4's without), or no CUDA for a CPU tier."""
    tier = tier_by_name(tier_name)
    if tier.kind == "cpu":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        return
    major, minor = (8, 0) if tier.bf16 else (7, 5)
    props = SimpleNamespace(name="Tesla T4" if tier.name == "t4-16gb" else f"stand-in {tier.name}", major=major, minor=minor,
                            total_memory=int(tier.total_gib * 2**30))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: props)


def walk(tmp_path, monkeypatch, tier: str, pick: int | None, model: str = estimate_view.DEFAULT_MODEL, **query: object) -> TrainConfig:
    """Estimator (opened on `tier`) -> "Use these settings in Fine-tune" (make-it-fit #pick) -> the form -> Start."""
    q = from_flat(MemoryQuery, {"model": model, **estimate_view.form_defaults(tier), **query})
    values, _rank = estimate_view.finetune_values(q, tier, pick)
    form = {**finetune_form.FT_DEFAULTS, **values, "run_name": f"walk-{tier}-{pick}"}  # the form as it opens, then the hand-off
    runs, uploads = tmp_path / "runs", tmp_path / "runs" / "_uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    cfg = finetune_form.train_config_from_form(form, None, None, upload_dir=uploads, runs_dir=runs)
    stand_in(monkeypatch, tier)
    launched = []
    monkeypatch.setattr(JobManager, "_launch", lambda self, run_dir, *, resume: launched.append(run_dir))
    name = JobManager(runs).start(cfg)  # raises if the device policy (or the data check) refuses what was proposed
    assert launched and launched[0].name == name
    return cfg


@pytest.mark.parametrize("pick", [None, 1], ids=["as-planned", "make-it-fit-1"])
@pytest.mark.parametrize("tier", TIERS)
def test_start_accepts_what_the_estimator_planned_for_each_card(tier, pick, tmp_path, monkeypatch):
    cfg = walk(tmp_path, monkeypatch, tier, pick)
    card = tier_by_name(tier)
    if card.kind == "cpu" or not card.bf16:
        assert cfg.precision == "auto" and cfg.quant.compute_dtype != "bf16", cfg
    # the method's learning rate, not the form's date-task 1e-3
    assert cfg.learning_rate == method_learning_rate(cfg.method, cfg.base_model) and cfg.learning_rate < 1e-3


def test_an_inference_plan_hands_over_the_cards_precision_too():
    values = train_values_for_card(MemoryQuery(model="qwen2.5-1.5b", task="inference"), "t4-16gb")
    assert values["precision"] == "auto" and "method" not in values and "learning_rate" not in values


@pytest.mark.parametrize("tier", ["t4-16gb", "gpu-4gb", "gpu-6gb"])
def test_a_bf16_plan_on_a_card_without_bf16_still_starts(tier, tmp_path, monkeypatch):
    # a person who set amp-bf16 by hand after picking the card: the hand-off still gives what the card takes
    cfg = walk(tmp_path, monkeypatch, tier, None, training_precision="amp-bf16")
    assert cfg.precision == "auto"


def test_the_estimator_follows_the_card():
    assert estimate_view.form_defaults("t4-16gb")["training_precision"] == "amp-fp16"
    assert estimate_view.form_defaults("a100-40gb")["training_precision"] == "amp-bf16"
    assert card_training_precision("amp-bf16", "t4-16gb") == "amp-fp16"
    assert card_training_precision("pure-bf16", "gpu-6gb") == "amp-fp16"
    assert card_training_precision("amp-fp16", "gpu-24gb") == "amp-bf16"
    assert card_training_precision("amp-fp16", "cpu-16gb") == "fp32"
    assert card_training_precision("fp32", "t4-16gb") == "fp32"
    assert card_training_precision("amp-bf16", "no-such-card") == "amp-bf16"


def test_auto_on_a_t4_is_what_a_family_that_overflows_in_fp16_needs():
    # why the hand-off says auto, not fp16, on a T4: auto computes Gemma in fp32 there, an explicit fp16 is refused
    t4 = DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5))
    assert card_precision("amp-fp16", tier_by_name("t4-16gb")) == "auto"
    assert resolve_dtype("auto", t4, model_type="gemma2") == torch.float32
    with pytest.raises(ConfigError):
        resolve_dtype("fp16", t4, model_type="gemma2")
    assert card_precision("amp-fp16", tier_by_name("gpu-24gb")) == "fp16"  # asked for on a card with bf16: kept
    assert card_precision("pure-bf16", tier_by_name("gpu-24gb")) == "bf16"


def test_learning_rates_by_method():
    q = MemoryQuery(model="qwen2.5-1.5b", task="qlora")
    assert train_values_for_card(q, "t4-16gb")["learning_rate"] == 2e-4
    assert train_values_for_card(MemoryQuery(model="qwen2.5-1.5b", task="full"), "gpu-80gb")["learning_rate"] == 2e-5
    assert train_values_for_card(MemoryQuery(model="builtin:compact-mini", task="full"), "cpu-16gb")["learning_rate"] == 1e-3


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_the_form_shows_the_planned_card_beside_this_machine(lang, tmp_path):
    q = from_flat(MemoryQuery, {"model": estimate_view.DEFAULT_MODEL, **estimate_view.form_defaults("t4-16gb")})
    values, _ = estimate_view.finetune_values(q, "t4-16gb", None)
    uploads = tmp_path / "_uploads"
    uploads.mkdir()
    cfg = finetune_form.train_config_from_form({**finetune_form.FT_DEFAULTS, **values}, None, None, upload_dir=uploads, runs_dir=tmp_path)
    alone = finetune_form.prediction_or_warning(lambda: cfg, tmp_path, lang)
    both = finetune_form.prediction_or_warning(lambda: cfg, tmp_path, lang, "t4-16gb")
    assert both.startswith(alone) and len(both) > len(alone)
    card_line = both[len(alone):]
    assert "T4" in card_line and "fp16" in card_line and ("14,7" if lang == "pt-BR" else "14.7") in card_line
    # a precision the planned card refuses is said, not predicted
    bf16 = finetune_form.card_prediction(from_flat(TrainConfig, {**finetune_form.FT_DEFAULTS, "precision": "bf16"}), "t4-16gb", tmp_path, lang)
    assert "bf16" in bf16 and "T4" in bf16
