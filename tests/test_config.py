"""Config dataclasses (engine/config.py): the rules of each job's `__post_init__`, with messages that name the field,
the value and what is allowed. The shared machinery (coercion, ranges, choices, round trips) is tested in test_fields.py."""

import pytest

from engine.config import GenerationSettings, LoraSettings, QuantSettings, TrainConfig
from engine.errors import ConfigError


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("run_name", "../escape", "letters, digits"),
        ("base_model", "  ", "base_model"),
    ],
)
def test_bad_values_name_the_field(field, value, fragment):
    with pytest.raises(ConfigError) as exc:
        TrainConfig(**{field: value})
    assert field in str(exc.value)
    assert fragment in str(exc.value)


def test_lora_targets_are_module_names():
    with pytest.raises(ConfigError, match="lora.targets"):
        LoraSettings(targets="q_proj; rm -rf /")


def test_generation_bounds():
    with pytest.raises(ConfigError, match="temperature"):
        GenerationSettings(temperature=-1)
    with pytest.raises(ConfigError, match="top_p"):
        GenerationSettings(top_p=1.5)


def test_scratch_needs_builtin_base():
    with pytest.raises(ConfigError, match="base_model"):
        TrainConfig(method="scratch", base_model="gpt2")


def test_quantization_rules_for_training():
    assert TrainConfig(method="qlora").quant.mode == "4bit"  # QLoRA is 4-bit by definition
    assert TrainConfig(method="lora", quant=QuantSettings(mode="8bit")).quant.mode == "8bit"
    with pytest.raises(ConfigError, match="quant.mode.*qlora"):
        TrainConfig(method="lora", quant=QuantSettings(mode="4bit"))
    with pytest.raises(ConfigError, match="quantized weights cannot be trained"):
        TrainConfig(method="full", quant=QuantSettings(mode="8bit"))
    with pytest.raises(ConfigError, match="CPU inference only"):
        TrainConfig(method="lora", quant=QuantSettings(mode="int8-dynamic"))
