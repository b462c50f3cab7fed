"""Plain help, details on demand: every form field's help is one short sentence in plain words, in English (the
fields' metadata, engine/config.py) and in Portuguese (presets/lang/pt-BR.yaml); the expert detail lives in
docs/settings.md, generated from the same metadata and kept up to date here; validation messages come in the
reader's language with numbers written for people."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine import i18n
from engine.config import FORM_CLASSES, GenerationSettings, LoraSettings, MemoryQuery, TrainConfig
from engine.errors import ConfigError, for_people
from engine.fields import field_specs, from_dict, from_flat, settings_markdown

ROOT = Path(__file__).resolve().parent.parent
SPECS = [(cls.__name__, spec) for cls in FORM_CLASSES for spec in field_specs(cls)]
IDS = [f"{cls}.{spec.name}" for cls, spec in SPECS]
# Words that belong in docs/settings.md, not in the one line under a field.
JARGON = ("HF ", "Trainer", "autocast", "bitsandbytes", "torch", "transformers", "litgpt", "torchtune", "peft", "matmul", "logits",
          "softmax", "dtype", "O(seq)", "materializ", "~")


def _sentences(text: str) -> int:
    """Sentences in a help text: a full stop followed by a capital letter starts a new one ("e.g. en" does not)."""
    return 1 + len(re.findall(r"[.!?]\s+[A-ZÀ-Ý]", text))


@pytest.mark.parametrize(("cls", "spec"), SPECS, ids=IDS)
def test_help_is_one_short_plain_sentence(cls, spec):
    for lang in i18n.LANGS:
        text = i18n.t(f"field.{cls}.{spec.name}.help", lang)
        assert len(text) <= 160, (lang, text)
        assert _sentences(text) == 1 and text.endswith("."), (lang, text)
        assert "(" not in text and not any(word in text for word in JARGON), (lang, text)
        assert not re.search(r"\d[eE][+-]?\d", text), (lang, text)  # never 1e-07 or 2.14748e+09
    assert len(spec.label) <= 32, spec.label  # a label, not a sentence


@pytest.mark.parametrize(("cls", "spec"), SPECS, ids=IDS)
def test_every_field_has_a_portuguese_label_and_help(cls, spec):
    pt = i18n.file_strings("pt-BR")
    for part in ("label", "help"):
        key = f"field.{cls}.{spec.name}.{part}"
        assert pt.get(key, "").strip(), key
    assert pt[f"field.{cls}.{spec.name}.help"] != spec.help  # translated, not copied


def test_field_keys_match_between_languages():
    en = {k for k in i18n.strings("en") if k.startswith("field.")}
    pt = {k for k in i18n.strings("pt-BR") if k.startswith("field.")}
    assert sorted(en - pt) == [] and sorted(pt - en) == []


def test_settings_doc_is_up_to_date():
    """docs/settings.md is generated: `python -m engine.config > docs/settings.md` after changing a field."""
    doc = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert doc == settings_markdown(FORM_CLASSES), "docs/settings.md is out of date: run python -m engine.config > docs/settings.md"


def test_settings_doc_has_the_detail_and_the_ranges():
    doc = settings_markdown(FORM_CLASSES)
    for cls in FORM_CLASSES:
        assert f"## {cls.__name__}" in doc
        for spec in field_specs(cls):
            assert f"| `{spec.name}` | {spec.label} |" in doc
    assert "HF Trainer bf16=True" in doc and "whole number from 0 to 2,147,483,647" in doc and "e+0" not in doc
    assert "number from 0.0000001 to 1" in doc  # the learning rate's lower bound, never 1e-07


@pytest.mark.parametrize(("data", "en", "pt"), [
    ({"max_steps": "lots"}, "Max steps (max_steps) = 'lots' is not allowed: a whole number.",
     "Máximo de passos (max_steps) = 'lots' não é permitido: um número inteiro."),
    ({"micro_batch_size": 10**9}, "Micro batch (micro_batch_size) = 1,000,000,000 is not allowed: a whole number from 1 to 4,096.",
     "Micro batch (micro_batch_size) = 1.000.000.000 não é permitido: um número inteiro de 1 a 4.096."),
    ({"lora.r": 0}, "LoRA rank (lora.r) = 0 is not allowed: a whole number from 1 to 512.",
     "Rank do LoRA (lora.r) = 0 não é permitido: um número inteiro de 1 a 512."),
    ({"learning_rate": 2.5}, "Learning rate (learning_rate) = 2.5 is not allowed: a number from 0.0000001 to 1.",
     "Taxa de aprendizado (learning_rate) = 2,5 não é permitido: um número de 0,0000001 a 1."),
    ({"method": "ppo"}, "Method (method) = 'ppo' is not allowed: one of qlora, lora, full, scratch, distill, dpo, orpo, kto, grpo.",
     "Método (method) = 'ppo' não é permitido: uma destas opções: qlora, lora, full, scratch, distill, dpo, orpo, kto, grpo."),
    ({"run_name": "../x"}, "Run name (run_name) = '../x' is not allowed: letters, digits, '-', '_' and '.' only (it becomes a folder name).",
     "Nome do treino (run_name) = '../x' não é permitido: só letras, dígitos, '-', '_' e '.' (o nome vira uma pasta)."),
    ({"method": "full", "quant.mode": "8bit"}, "quantized weights cannot be trained", "pesos quantizados não podem ser treinados"),
])
def test_validation_messages_in_the_readers_language(data, en, pt):
    with pytest.raises(ConfigError) as exc:
        from_flat(TrainConfig, data)
    assert en in exc.value.render("en")
    assert pt in exc.value.render("pt-BR")
    name = next(iter(data)) if len(data) == 1 else "quant.mode"
    assert str(exc.value).startswith(f"{name} = ")  # the CLI names the field as its flag does, without the label


def test_messages_of_other_forms_and_nested_classes():
    with pytest.raises(ConfigError) as exc:
        from_dict(GenerationSettings, {"stop_strings": "\n".join(f"s{i}" for i in range(9))})
    assert exc.value.render("pt-BR") == ("Textos de parada (stop_strings) = 's0\\ns1\\ns2\\ns3\\ns4\\ns5\\ns6\\ns7\\ns8' não é permitido: "
                                         "no máximo 8 textos de parada, um por linha (foram 9).")
    with pytest.raises(ConfigError) as exc:
        MemoryQuery(batch=0)
    assert exc.value.field == "batch" and exc.value.render("pt-BR").startswith("Batch (batch) = 0 não é permitido: um número inteiro de 1 a")
    with pytest.raises(ConfigError) as exc:  # built directly, LoraSettings names its own field: no form label to show
        LoraSettings(r=0)
    assert exc.value.render("en") == "r = 0 is not allowed: a whole number from 1 to 512."
    with pytest.raises(ConfigError) as exc:
        from_dict(TrainConfig, {"lernrate": 1})
    assert exc.value.render("pt-BR").startswith("lernrate = 1 não é permitido: um campo conhecido de TrainConfig: base_model, ")


def test_a_plain_allowed_text_is_kept_as_is():
    exc = ConfigError("max_steps", "x", "a number", owner="TrainConfig")
    assert str(exc) == "max_steps = 'x' is not allowed: a number."
    assert exc.render("pt-BR") == "Máximo de passos (max_steps) = 'x' não é permitido: a number."
    assert exc.allowed == "a number"


@pytest.mark.parametrize(("value", "en", "pt"), [
    (2**31 - 1, "2,147,483,647", "2.147.483.647"), (1048576.0, "1,048,576", "1.048.576"), (1e-7, "0.0000001", "0,0000001"),
    (0.05, "0.05", "0,05"), (-1.5, "-1.5", "-1,5"), (True, "on", "ligado"), ([1, 2], "1, 2", "1, 2"), ("x", "x", "x"),
])
def test_values_for_people(value, en, pt):
    assert for_people(value, "en") == en and for_people(value, "pt-BR") == pt
