"""The built-in compact presets (`builtin:NAME`) as estimator architectures, counted from their numbers alone.

A preset of presets/compact.yaml is plain architecture numbers for CompactLLM (engine/models/compact.py). The
estimator reads them as data and never imports the model code, so instead of building the model on the meta
device (engine/estimator/architecture.py) it fills in the `Arch` that `analyze` would measure, with CompactLLM's
parameter count written out. With C = hidden, I = intermediate, V = vocab, P = positions, L = layers and
b = 1 with biases (the default), 0 without:

    token + position embeddings   V*C + P*C
    each of the L blocks: linears q, k, v, o: 4*C*C   MLP up, down: 2*C*I       (biases b * (4*C + I + C))
                          2 LayerNorms: 2 * (C + b*C)
    final LayerNorm               C + b*C
    lm_head                       V*C, none when tied to the token embedding (the default)

tests/estimator/test_compact_arch.py checks the whole `Arch` against `analyze` of the real model's config and
the total against sum(p.numel()) of a real CompactForCausalLM for every preset, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelLoadError
from .architecture import Arch, LinearSpec
from .catalog import compact_presets

MODEL_TYPE = "compact_llm"  # CompactConfig.model_type
# CompactConfig's defaults for the numbers a preset may leave out (the test compares them with the class).
CONFIG_DEFAULTS: dict[str, Any] = {
    "vocab_size": 8192,
    "max_position_embeddings": 1024,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 6,
    "intermediate_size": 1536,
    "dropout": 0.1,
    "bias": True,
    "tie_word_embeddings": True,
}


def builtin_arch(ref: str) -> Arch:
    """The architecture of `builtin:NAME`; ModelLoadError for an unknown preset (the message of load_compact_preset)."""
    name = ref.split(":", 1)[1]
    presets = compact_presets()
    if name not in presets:
        raise ModelLoadError(f"Unknown compact preset {name!r}. Available presets: {', '.join(presets)}.")
    numbers = {**CONFIG_DEFAULTS, **presets[name]}
    return compact_arch(numbers, ref=ref, label=f"{ref} (built-in compact model)", source="presets/compact.yaml")


def compact_arch(numbers: dict[str, Any], *, ref: str, label: str, source: str) -> Arch:
    """The `Arch` of a CompactLLM with these config numbers (all keys of CONFIG_DEFAULTS), as `analyze` measures it."""
    C, inter, V, P = numbers["hidden_size"], numbers["intermediate_size"], numbers["vocab_size"], numbers["max_position_embeddings"]
    layers, heads = numbers["num_hidden_layers"], numbers["num_attention_heads"]
    bias, tied = bool(numbers["bias"]), bool(numbers["tie_word_embeddings"])
    b = int(bias)
    # One block in the order of its named_modules (attention, then MLP), with the roles analyze gives them.
    linears = (
        LinearSpec("self_attn.q_proj", "attn_in", C, C, bias),
        LinearSpec("self_attn.k_proj", "attn_in", C, C, bias),
        LinearSpec("self_attn.v_proj", "attn_in", C, C, bias),
        LinearSpec("self_attn.o_proj", "attn_out", C, C, bias),
        LinearSpec("mlp.up_proj", "mlp_in", C, inter, bias),
        LinearSpec("mlp.down_proj", "mlp_out", inter, C, bias),
    )
    embedding = V * C + P * C
    lm_head = 0 if tied else V * C
    layer_linear = layers * (4 * C * C + 2 * C * inter)
    layer_bias = layers * b * (4 * C + inter + C)
    other = (2 * layers + 1) * (C + b * C)  # LayerNorm weights (and biases): two per block and the final one
    dropout = float(numbers["dropout"] or 0.0)
    return Arch(
        ref=ref, label=label, model_type=MODEL_TYPE, source=source,
        n_layers=int(layers), hidden=int(C), n_heads=int(heads), n_kv_heads=int(heads), head_dim=int(C) // int(heads),
        intermediate=int(inter), vocab=int(V), max_positions=P, tied=tied,
        params_total=int(embedding + lm_head + layer_linear + layer_bias + other), params_embedding=int(embedding),
        params_lm_head=int(lm_head), params_layer_linear=int(layer_linear), params_layer_bias=int(layer_bias),
        params_other=int(other), linears=linears, norm_type="ln", norms_per_layer=2, gated_mlp=False, python_gelu=False,
        hidden_dropout=dropout, attention_dropout=dropout,
    )
