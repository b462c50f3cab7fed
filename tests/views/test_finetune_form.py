"""The fine-tune form without its widgets: sections, the config its values make, the prediction and the command."""

from __future__ import annotations

import pytest

from engine.config import TrainConfig
from engine.errors import ConfigError
from engine.fields import field_specs
from engine.views.finetune_form import (
    DISTILL_ONLY,
    FT_DATA,
    FT_DEFAULTS,
    FT_LORA,
    FT_MAIN,
    FT_RUN,
    FT_TRAIN,
    data_check,
    memory_prediction,
    prediction_or_warning,
    preset_values,
    reproduce_command,
    train_config_from_form,
)

NAMES = FT_MAIN + FT_TRAIN + FT_LORA + FT_RUN + FT_DATA


def _values(**over):
    return {**{s.name: s.default for s in field_specs(TrainConfig)}, **FT_DEFAULTS, **over}


def test_sections_cover_each_field_once():
    assert len(NAMES) == len(set(NAMES)) and set(NAMES) <= {s.name for s in field_specs(TrainConfig)}
    assert set(DISTILL_ONLY) <= set(NAMES) and set(FT_DEFAULTS) <= set(NAMES)


def test_config_from_form_sets_the_quantization_from_the_method_and_keeps_uploads(tmp_path):
    runs, uploads = tmp_path / "runs", tmp_path / "runs" / "_uploads"
    uploads.mkdir(parents=True)
    kw = {"upload_dir": uploads, "runs_dir": runs}
    assert train_config_from_form(_values(), None, None, **kw).quant.mode == "none"
    assert train_config_from_form(_values(**{"method": "qlora", "quant.mode": "none"}), None, None, **kw).quant.mode == "4bit"
    assert train_config_from_form(_values(**{"method": "lora", "quant.mode": "8bit"}), None, None, **kw).quant.mode == "8bit"
    assert train_config_from_form(_values(**{"method": "full", "quant.mode": "8bit"}), None, None, **kw).quant.mode == "none"
    data = tmp_path / "mine.jsonl"
    data.write_text('{"text": "hello"}\n')
    cfg = train_config_from_form(_values(), str(data), str(data), **kw)
    assert cfg.dataset.startswith(str(uploads)) and cfg.eval_dataset == cfg.dataset


def test_prediction_and_reproduce_command(tmp_path):
    cfg = train_config_from_form(_values(), None, None, upload_dir=tmp_path, runs_dir=tmp_path)
    text, verdict = memory_prediction(cfg)
    assert text.startswith("Effective batch **16** (micro batch 16 × accumulation 1) · precision **") and verdict in ("fits", "tight", "no")
    text, verdict = memory_prediction(TrainConfig(base_model="run:earlier"))
    assert verdict is None and "shown once the run starts" in text
    cmd = reproduce_command(cfg)
    assert cmd.startswith("# save as run.yaml, then:\n#   python -m engine train --config run.yaml\n") and "builtin:compact-mini" in cmd


def test_prediction_or_warning(tmp_path):
    cfg = train_config_from_form(_values(), None, None, upload_dir=tmp_path, runs_dir=tmp_path)
    assert prediction_or_warning(lambda: cfg) == memory_prediction(cfg)[0]

    def bad():
        raise ConfigError("max_steps", -1, "at least 1")

    assert prediction_or_warning(bad) == "⚠ max_steps = -1 is not allowed: at least 1."


def test_data_check_shapes_the_preview_rows_and_the_histogram(monkeypatch, tmp_path):
    from types import SimpleNamespace

    import engine.training.data_check as data_check_module

    ins = SimpleNamespace(summary="2 rows", preview=[{"row": 0, "text": "a ⟦b⟧", "n_tokens": 5, "n_trainable": 2, "extra": 1}],
                          histogram=[[8, 1], [16, 1]], dropped=None)
    seen = []
    monkeypatch.setattr(data_check_module, "inspect_dataset", lambda cfg, runs_dir, lang: seen.append(lang) or ins)
    summary, rows, hist, dropped = data_check(TrainConfig(), tmp_path)
    assert summary == "2 rows" and rows.values.tolist() == [[0, "a ⟦b⟧", 5, 2]] and dropped.empty
    assert list(rows.columns) == ["row", "as the model sees it (⟦trained⟧)", "tokens", "trained tokens"]
    assert list(hist.columns) == ["tokens", "rows"] and hist.values.tolist() == [[8, 1], [16, 1]]
    _, rows, _, dropped = data_check(TrainConfig(), tmp_path, "pt-BR")
    assert seen == ["en", "pt-BR"] and list(rows.columns)[0] == "linha" and list(dropped.columns) == ["linha", "por que foi descartada"]


def test_prediction_and_command_in_portuguese(tmp_path):
    cfg = train_config_from_form(_values(), None, None, upload_dir=tmp_path, runs_dir=tmp_path)
    text, verdict = memory_prediction(cfg, tmp_path, "pt-BR")
    assert text.startswith("Batch efetivo **16** (micro batch 16 × acumulação 1) · precisão **")
    assert ("para o treino do modelo" in text or "alocados pelo PyTorch" in text) and ("cabe" in text or "no limite" in text)
    assert reproduce_command(cfg, "pt-BR").startswith("# salve como run.yaml e depois rode:")

    def bad():
        raise ConfigError("max_steps", -1, "at least 1")

    assert prediction_or_warning(bad, lang="pt-BR") == "⚠ max_steps = -1 não é permitido: at least 1."


def test_the_top_of_the_form_and_the_accordions_cover_the_training_fields_once():
    from engine.views.finetune_form import FT_OPTIMIZER, FT_TOP, FT_TRAINING

    assert FT_TOP[:4] == ["base_model", "method", "teacher_model", "dataset"] and set(FT_TOP) <= set(FT_MAIN + FT_TRAIN)
    shown = [n for n in FT_TOP if n in FT_TRAIN] + FT_TRAINING + FT_OPTIMIZER
    assert sorted(shown) == sorted(FT_TRAIN)


def test_preset_values_explain_and_fill_the_form():
    from engine.estimator.recipes import AUTO, apply_recipe

    values = {n: v for n, v in _values().items() if n in NAMES}
    note, filled = preset_values(values, None)
    applied = apply_recipe(values, AUTO, values["base_model"])
    assert note == applied.explanation and filled == applied.values and set(filled) <= set(NAMES)


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_a_lora_of_the_builtin_model_on_the_date_task_is_warned_before_start(tmp_path, lang):
    """LoRA/QLoRA of builtin:compact-mini on builtin:dates stayed at 0% at every learning rate measured (presets/recipes.yaml):
    the prediction says so before Start and names the method that shows a result; full fine-tuning gets no such line."""
    lora = train_config_from_form({**_values(), "method": "lora"}, None, None, upload_dir=tmp_path, runs_dir=tmp_path)
    text = prediction_or_warning(lambda: lora, tmp_path, lang)
    assert text.startswith("⚠ LORA") and "**full**" in text and ("500 passos" if lang == "pt-BR" else "500 steps") in text
    full = train_config_from_form(_values(), None, None, upload_dir=tmp_path, runs_dir=tmp_path)
    assert "**full**" not in prediction_or_warning(lambda: full, tmp_path, lang)
