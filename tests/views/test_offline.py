"""Hub models on an app without the internet: marked in the estimator's list, said by the hand-off and in the fine-tune
form (with the built-in model offered), and refused at Start at once; nothing is marked when the Hub is reachable or the
model is in the local cache. The tests run offline (HF_HUB_OFFLINE=1, tests/conftest.py)."""

from __future__ import annotations

import pytest

from engine.config import TrainConfig
from engine.errors import EngineError
from engine.models import hub_access
from engine.views import estimate_view, finetune_form, offline


def test_the_app_knows_it_is_offline_without_a_connection_attempt(monkeypatch):
    monkeypatch.setattr(hub_access, "can_connect", lambda *a, **k: pytest.fail("offline mode needs no probe"))
    assert hub_access.hub_online() is False
    assert hub_access.needs_internet("Qwen/Qwen2.5-1.5B-Instruct") is True


def test_which_references_download_from_the_hub():
    assert offline.hub_id_of("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    assert offline.hub_id_of("llama-3.1-8b") == offline.hub_id_of("Llama 3.1 8B") == "meta-llama/Llama-3.1-8B"
    assert [offline.hub_id_of(r) for r in ("builtin:compact-mini", "run:r1", "manual:2,64,4,4,128,100,0", "/tmp/config.json", "", None)] == [None] * 6
    assert not offline.needs_internet_now("builtin:compact-mini")


def test_the_estimator_list_marks_hub_models_offline_in_both_languages():
    en = dict((v, label) for label, v in estimate_view.model_choices("en"))
    pt = dict((v, label) for label, v in estimate_view.model_choices("pt-BR"))
    assert en[estimate_view.DEFAULT_MODEL].endswith(" · needs the internet") and pt["llama-3.1-8b"].endswith(" · precisa de internet")
    assert en["builtin:compact-mini"] == "builtin:compact-mini"  # the built-in models work offline
    online = dict((v, label) for label, v in estimate_view.model_choices("en", online=True))
    assert "internet" not in "".join(online.values())


def test_a_model_in_the_local_cache_is_not_marked(monkeypatch):
    monkeypatch.setattr(hub_access, "in_local_cache", lambda repo: repo == "Qwen/Qwen2.5-1.5B-Instruct")
    assert not offline.needs_internet_now("Qwen/Qwen2.5-1.5B-Instruct") and offline.needs_internet_now("gpt2")


def test_the_hand_off_and_the_form_offer_the_built_in_model(tmp_path):
    warning = offline.handoff_warning("Qwen/Qwen2.5-1.5B-Instruct", "pt-BR")
    assert "precisa de internet" in warning and "builtin:compact-mini" in warning
    assert offline.handoff_warning("builtin:compact-mini") == ""
    cfg = TrainConfig(base_model="Qwen/Qwen2.5-1.5B-Instruct", method="qlora")
    text = finetune_form.prediction_or_warning(lambda: cfg, tmp_path)
    assert text.startswith("⚠ **Qwen/Qwen2.5-1.5B-Instruct** is downloaded from the Hugging Face Hub") and "`builtin:compact-mini`" in text
    assert "GiB" in text  # the prediction is still there, under the note
    assert "needs the internet" not in finetune_form.prediction_or_warning(lambda: TrainConfig(), tmp_path)
    assert "Hugging Face Hub" not in finetune_form.prediction_or_warning(lambda: TrainConfig(), tmp_path)


def test_start_refuses_a_hub_model_offline_at_once_in_the_visitors_language():
    with pytest.raises(EngineError) as exc:
        finetune_form.check_reachable(TrainConfig(base_model="Qwen/Qwen2.5-1.5B-Instruct", method="qlora"))
    assert exc.value.key == "playground.error.hub_offline" and "Qwen/Qwen2.5-1.5B-Instruct" in exc.value.render("pt-BR")
    finetune_form.check_reachable(TrainConfig())  # the built-in model: nothing to download


def test_the_fine_tune_lists_mark_hub_models_offline():
    refs = ["builtin:compact-mini", "run:mine", "Qwen/Qwen2.5-0.5B"]
    assert offline.marked_choices(refs, "pt-BR") == [("builtin:compact-mini", "builtin:compact-mini"), ("run:mine", "run:mine"),
                                                     ("Qwen/Qwen2.5-0.5B · precisa de internet", "Qwen/Qwen2.5-0.5B")]
    assert offline.marked_choices(refs, online=True) == [(r, r) for r in refs]
