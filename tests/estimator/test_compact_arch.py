"""The built-in compact presets counted from their numbers (engine/estimator/compact_arch.py) equal the real model.

The estimator describes `builtin:NAME` without importing engine/models (the layer rule); these tests import the
model code to check that formula: the whole `Arch` equals `analyze` of the real CompactConfig on the meta device,
and the total equals sum(p.numel()) of a really built CompactForCausalLM, for every preset and for the options
no preset uses yet (no biases, untied head, another vocabulary).
"""

from __future__ import annotations

import pytest

from engine.errors import ModelLoadError
from engine.estimator.architecture import analyze
from engine.estimator.catalog import compact_presets
from engine.estimator.compact_arch import CONFIG_DEFAULTS, MODEL_TYPE, builtin_arch, compact_arch
from engine.estimator.model_config import resolve
from engine.models import compact as model_code

PRESETS = sorted(model_code.compact_presets())


def real_params(config: model_code.CompactConfig) -> int:
    import torch

    torch.manual_seed(0)
    model = model_code.CompactForCausalLM(config)
    return sum({id(p): p.numel() for p in model.parameters()}.values())


def test_reads_the_same_presets_as_the_model_code():
    assert compact_presets() == model_code.compact_presets()


def test_defaults_are_compact_configs():
    default = model_code.CompactConfig()
    assert MODEL_TYPE == default.model_type
    assert {k: getattr(default, k) for k in CONFIG_DEFAULTS} == CONFIG_DEFAULTS


@pytest.mark.parametrize("name", PRESETS)
def test_preset_arch_equals_meta_analysis_and_real_model(name):
    ref = f"builtin:{name}"
    arch = resolve(ref)
    config = model_code.load_compact_preset(name)
    assert arch == analyze(config, ref=ref, label=f"{ref} (built-in compact model)", source="presets/compact.yaml")
    assert arch.params_total == real_params(config)


@pytest.mark.parametrize("changes", [{"bias": False}, {"tie_word_embeddings": False}, {"vocab_size": 1000, "dropout": 0.0}])
def test_formula_holds_beyond_the_presets(changes):
    numbers = {**CONFIG_DEFAULTS, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96, "num_hidden_layers": 3,
               "max_position_embeddings": 32, **changes}
    config = model_code.CompactConfig(**numbers)
    arch = compact_arch(numbers, ref="t", label="t", source="t")
    assert arch == analyze(config, ref="t", label="t", source="t")
    assert arch.params_total == real_params(config)


def test_unknown_preset_same_message_as_the_model_code():
    with pytest.raises(ModelLoadError) as ours:
        builtin_arch("builtin:compact-huge")
    with pytest.raises(ModelLoadError) as theirs:
        model_code.load_compact_preset("compact-huge")
    assert str(ours.value) == str(theirs.value)

