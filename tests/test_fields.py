"""Field machinery (engine/fields.py): coercion, range and choice checks name the field, the value and what is
allowed; dict and flat round trips; the field descriptions the UI and the CLI are generated from."""

import dataclasses

import pytest

from engine.config import GenerationSettings, LoraSettings, MemoryQuery, QuantSettings, TrainConfig
from engine.errors import ConfigError
from engine.fields import field_specs, from_dict, from_flat, to_dict


def test_defaults_are_valid_and_round_trip():
    for cls in (TrainConfig, GenerationSettings, QuantSettings, LoraSettings, MemoryQuery):
        obj = cls()
        assert from_dict(cls, to_dict(obj)) == obj


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("learning_rate", -1.0, "learning_rate"),
        ("learning_rate", float("nan"), "finite"),
        ("micro_batch_size", 0, "a whole number from 1 to 4,096"),
        ("micro_batch_size", 10**9, "1,000,000,000 is not allowed"),
        ("micro_batch_size", "abc", "whole number"),
        ("epochs", "1e999", "finite"),
        ("method", "ppo", "one of qlora, lora, full, scratch"),
        ("precision", "fp8", "one of"),
        ("max_seq_len", 4.5, "whole number"),
        ("grad_checkpointing", "maybe", "true or false"),
    ],
)
def test_bad_values_name_the_field(field, value, fragment):
    with pytest.raises(ConfigError) as exc:
        from_dict(TrainConfig, {field: value})
    assert field in str(exc.value)
    assert fragment in str(exc.value)


def test_unknown_key_is_rejected():
    with pytest.raises(ConfigError, match="lernrate"):
        from_dict(TrainConfig, {"lernrate": 1})


def test_nested_and_flat():
    cfg = from_flat(TrainConfig, {"lora.r": "8", "quant.mode": "8bit", "micro_batch_size": 2.0})
    assert cfg.lora.r == 8 and cfg.quant.mode == "8bit" and cfg.micro_batch_size == 2
    with pytest.raises(ConfigError, match="lora.r = 0"):  # named as the form knows it, not as LoraSettings' own `r`
        from_flat(TrainConfig, {"lora.r": 0})


def test_field_specs_cover_every_field_with_help():
    specs = field_specs(TrainConfig)
    names = {s.name for s in specs}
    assert {"method", "lora.r", "quant.mode", "learning_rate"} <= names
    for s in specs:
        assert s.help, s.name
    method = next(s for s in specs if s.name == "method")
    assert method.choices == ("qlora", "lora", "full", "scratch", "distill", "dpo", "orpo", "kto", "grpo")
    # every scalar field of TrainConfig appears exactly once
    flat = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("quant", "lora")]
    assert all(n in names for n in flat)


@pytest.mark.parametrize(("typed", "value"), [("0,0005", 0.0005), ("0.0005", 0.0005), ("5e-4", 0.0005), (" 0,0002 ", 0.0002), ("1.000,5", 1000.5),
                                              ("1,000.5", 1000.5), ("2", 2.0), ("−0,5", -0.5)])
def test_decimals_as_people_type_them(typed, value):
    """A decimal comma (as the Portuguese page prints numbers) or point, in a float field (issue 32: "0,0005" became 5)."""
    from engine.config import TrainConfig
    from engine.fields import parse_decimal

    assert parse_decimal(typed) == pytest.approx(value)
    if 0 < value <= 1:
        assert from_flat(TrainConfig, {"learning_rate": typed}).learning_rate == pytest.approx(value)


def test_a_float_field_is_written_back_as_typed():
    from engine.fields import decimal_text, parse_decimal

    assert [decimal_text(v) for v in (2e-5, 1e-3, 1.0, 1000.0, 0.0)] == ["0.00002", "0.001", "1", "1000", "0"]  # never 2e-05, never 1,000
    assert decimal_text(2e-4, "pt-BR") == "0,0002" and parse_decimal(decimal_text(2e-4, "pt-BR")) == 2e-4


@pytest.mark.parametrize("typed", ["abc", "0,1,2", "1e", ""])
def test_an_unreadable_decimal_names_the_field(typed):
    from engine.config import TrainConfig

    with pytest.raises(ConfigError, match="learning_rate"):
        from_flat(TrainConfig, {"learning_rate": typed})
