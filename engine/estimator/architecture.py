"""What the memory estimator knows about a causal LM (`Arch`), measured exactly from its transformers config.

`analyze(config)` builds the model on the meta device (`with torch.device("meta")`): shapes without storage, so
a 70B model takes a fraction of a second and no weights are downloaded. Unique parameters are counted by
identity, so tied embeddings count once (accelerate's `init_empty_weights` unties them under transformers 5.23
and would report gemma-2b as 3.03B instead of 2.51B). One decoder layer's linear layers are recorded (name,
role, shape) because the estimator needs them: bitsandbytes quantizes exactly the linear layers inside the
decoder (not embeddings, norms or lm_head), and LoRA adds r x (d_in + d_out) per targeted linear;
`Arch.lora_modules` turns a LoRA target spec into those layers.

Where a config comes from (a model reference: catalog, Hub, config.json, manual) is engine/estimator/model_config.py;
the built-in compact presets are described from their numbers in engine/estimator/compact_arch.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, ModelLoadError, Phrase

# Leaf names of linear layers by role. Roles decide which activations a layer keeps (see engine/estimator/memory.py).
_ATTN_IN = {"q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "Wqkv", "W_pack", "query", "key", "value", "q", "k", "v"}
_ATTN_OUT = {"o_proj", "out_proj", "dense", "c_proj", "o", "wo_attn"}
_MLP_IN = {"gate_proj", "up_proj", "gate_up_proj", "fc1", "c_fc", "dense_h_to_4h", "w1", "w3", "fc_in", "wi", "wi_0", "wi_1"}
_MLP_OUT = {"down_proj", "fc2", "c_proj", "dense_4h_to_h", "w2", "fc_out", "wo"}
_FUSED_QKV = {"qkv_proj", "query_key_value", "c_attn", "Wqkv", "W_pack"}
_GATE = {"gate_proj", "w1", "gate_up_proj", "wi_0"}
_UP = {"up_proj", "gate_up_proj", "fc1", "c_fc", "dense_h_to_4h", "w3", "fc_in", "wi", "wi_1"}
# Activation functions that transformers implements as several Python ops (each keeps a tensor for backward).
_PYTHON_GELU = {"gelu_new", "gelu_fast", "gelu_python", "quick_gelu", "gelu_accurate"}

LORA_KEYS = ("q", "k", "v", "o", "gate", "up", "down", "lm_head")


@dataclass(frozen=True)
class LinearSpec:
    """One linear layer of a decoder block (nn.Linear or transformers' Conv1D)."""

    name: str  # path inside the block, e.g. "self_attn.q_proj"
    role: str  # attn_in | attn_out | mlp_in | mlp_out
    d_in: int
    d_out: int
    bias: bool

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Arch:
    """What the estimator needs to know about a causal LM; all counts are exact unique parameters."""

    ref: str  # the reference it was resolved from (canonical form)
    label: str
    model_type: str
    source: str  # where the config came from (catalog URL, file, Hub id, manual)
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int  # MLP width (per projection)
    vocab: int
    max_positions: int | None
    tied: bool  # lm_head shares the input embedding
    params_total: int
    params_embedding: int  # token (+ position) embeddings
    params_lm_head: int  # 0 when tied
    params_layer_linear: int  # weights of all linear layers inside decoder blocks: what bitsandbytes quantizes
    params_layer_bias: int  # their biases (stay 16-bit)
    params_other: int  # norms and everything else
    linears: tuple[LinearSpec, ...]  # one decoder block
    norm_type: str  # "rms" | "ln"
    norms_per_layer: int
    gated_mlp: bool
    python_gelu: bool
    sliding_window: int | None = None
    sliding_layers: int = 0  # how many layers attend within the sliding window only
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    sdpa: bool = True  # transformers can run it with SDPA (Gemma 2's soft-capping needs eager)
    parallel_residual: bool = False  # attention and MLP read the same block input (GPT-NeoX, Phi, Falcon)
    attn_softcap: bool = False  # tanh soft-capping of attention scores (Gemma 2)
    logit_softcap: bool = False  # tanh soft-capping of the final logits (Gemma 2)
    published_params: float | None = None
    encoder: bool = False  # bidirectional (BERT-like): trained on every token at once, never generates
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def linears_by_role(self, role: str) -> list[LinearSpec]:
        return [lin for lin in self.linears if lin.role == role]

    def lora_modules(self, targets: str | list[str] | tuple[str, ...]) -> tuple[list[LinearSpec], bool]:
        """Linear layers of one block that a LoRA target spec selects, and whether lm_head is targeted.

        Accepts the issue's keys (q,k,v,o,gate,up,down,lm_head), 'all-linear' (peft: every linear in the blocks,
        not lm_head), 'attention' (q,k,v,o) or this model's own module names (q_proj, c_attn, ...), as a comma
        list or a list. A fused projection (c_attn, qkv_proj, gate_up_proj) is selected once by any of its keys.
        """
        tokens = _split_targets(targets)
        chosen: dict[str, LinearSpec] = {}
        lm_head = False
        leaves = {lin.leaf for lin in self.linears}
        for tok in tokens:
            low = tok.lower()
            if low in ("all-linear", "all_linear", "all"):
                chosen.update({lin.name: lin for lin in self.linears})
            elif low in ("attention", "attn"):
                chosen.update({lin.name: lin for lin in self.linears if lin.role in ("attn_in", "attn_out")})
            elif low in ("lm_head", "output", "lm-head"):
                lm_head = True
            elif low in LORA_KEYS:
                chosen.update({lin.name: lin for lin in self.linears if _matches_key(lin, low)})
            elif tok in leaves or tok.rsplit(".", 1)[-1] in leaves:
                leaf = tok.rsplit(".", 1)[-1]
                chosen.update({lin.name: lin for lin in self.linears if lin.leaf == leaf})
            else:
                raise ConfigError("lora_targets", targets, allowed_key="error.estimator.allowed.lora_targets_model", names=", ".join(sorted(leaves)))
        return list(chosen.values()), lm_head


def _split_targets(targets: str | list[str] | tuple[str, ...]) -> list[str]:
    if isinstance(targets, str):
        tokens = [t.strip() for t in targets.split(",")]
    else:
        tokens = [str(t).strip() for t in targets]
    tokens = [t for t in tokens if t]
    if not tokens:
        raise ConfigError("lora_targets", targets, allowed_key="error.estimator.allowed.lora_targets_one")
    return tokens


def _matches_key(lin: LinearSpec, key: str) -> bool:
    leaf = lin.leaf
    if key in ("q", "k", "v"):
        if lin.role != "attn_in":
            return False
        return leaf in _FUSED_QKV or leaf.startswith(key) or leaf in {"query" if key == "q" else "", "key" if key == "k" else "", "value" if key == "v" else ""}
    if key == "o":
        return lin.role == "attn_out"
    if key == "gate":
        return lin.role == "mlp_in" and leaf in _GATE
    if key == "up":
        return lin.role == "mlp_in" and leaf in _UP
    if key == "down":
        return lin.role == "mlp_out"
    return False


def _get(cfg: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = getattr(cfg, name, None)
        if value is not None:
            return value
    return default


def analyze(cfg: Any, *, ref: str, label: str, source: str, published: float | None = None) -> Arch:
    """Build the model on the meta device and measure it (no weights are allocated)."""
    import torch
    from torch import nn
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM
    from transformers.pytorch_utils import Conv1D

    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    n_layers = _get(text_cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _get(text_cfg, "hidden_size", "n_embd", "d_model")
    for name, value in (("layers", n_layers), ("hidden", hidden), ("vocab", _get(text_cfg, "vocab_size"))):
        if not isinstance(value, int) or value < 1:
            raise ModelLoadError(key="error.estimator.bad_size", label=label, name=Phrase(f"error.estimator.size_name.{name}"), value=repr(value))
    model_type = str(getattr(cfg, "model_type", ""))
    if getattr(cfg, "is_encoder_decoder", False):
        # An encoder-decoder keeps encoder states, cross-attention and two stacks: none of that is in these terms.
        raise ModelLoadError(key="error.estimator.seq2seq", label=label, model_type=model_type)
    encoder = _is_encoder(cfg)
    try:
        with torch.device("meta"):
            model = (AutoModelForMaskedLM if encoder else AutoModelForCausalLM).from_config(cfg)
    except (ValueError, TypeError, AttributeError, RuntimeError, KeyError, AssertionError) as exc:
        raise ModelLoadError(key="error.estimator.cannot_build_" + ("masked" if encoder else "causal"), label=label, kind=type(exc).__name__,
                              detail=str(exc)) from exc
    if hasattr(model, "tie_weights"):
        model.tie_weights()  # ties as the real load would (from_config on the meta device already does; cheap)

    unique: dict[int, Any] = {}
    for p in model.parameters():
        unique[id(p)] = p
    total = sum(p.numel() for p in unique.values())

    emb_in = model.get_input_embeddings()
    emb_out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    in_w = emb_in.weight if emb_in is not None else None
    out_w = getattr(emb_out, "weight", None) if emb_out is not None else None
    tied = out_w is not None and in_w is not None and out_w is in_w
    lm_head = 0 if (tied or out_w is None) else out_w.numel() + (emb_out.bias.numel() if getattr(emb_out, "bias", None) is not None else 0)

    # Decoder blocks: the ModuleList with one entry per layer.
    blocks = None
    for mod in model.modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and (blocks is None or _nparams(mod) > _nparams(blocks)):
            blocks = mod
    if blocks is None:
        raise ModelLoadError(key="error.estimator.no_layers", label=label, n=n_layers)

    counted: set[int] = set()
    layer_linear = layer_bias = 0
    for block in blocks:
        for mod in block.modules():
            if isinstance(mod, (nn.Linear, Conv1D)):
                layer_linear += mod.weight.numel()
                counted.add(id(mod.weight))
                if mod.bias is not None:
                    layer_bias += mod.bias.numel()
                    counted.add(id(mod.bias))
    embedding = 0
    for mod in model.modules():
        if isinstance(mod, nn.Embedding) and id(mod.weight) not in counted:
            embedding += mod.weight.numel()
            counted.add(id(mod.weight))
    if out_w is not None and id(out_w) not in counted:
        counted.add(id(out_w))
        if getattr(emb_out, "bias", None) is not None:
            counted.add(id(emb_out.bias))
    other = sum(p.numel() for pid, p in unique.items() if pid not in counted)

    linears: list[LinearSpec] = []
    norm_type, norms = "ln", 0
    for name, mod in blocks[0].named_modules():
        if isinstance(mod, nn.Linear):
            linears.append(LinearSpec(name, _role(name, mod.in_features, mod.out_features, hidden), mod.in_features, mod.out_features, mod.bias is not None))
        elif isinstance(mod, Conv1D):
            d_in, d_out = mod.weight.shape  # Conv1D stores (in, out)
            linears.append(LinearSpec(name, _role(name, d_in, d_out, hidden), int(d_in), int(d_out), mod.bias is not None))
        cls = type(mod).__name__.lower()
        weight = getattr(mod, "weight", None)
        # Norms over the hidden size only (Qwen3's per-head q_norm/k_norm act on head_dim and cost little).
        if "norm" in cls and weight is not None and weight.numel() == hidden and not list(mod.children()):
            norms += 1
            if "rms" in cls:
                norm_type = "rms"
    n_heads = _get(text_cfg, "num_attention_heads", "n_head", "num_heads")
    kv_heads = _get(text_cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv_heads is None:
        kv_heads = 1 if getattr(text_cfg, "multi_query", False) else n_heads
    head_dim = _get(text_cfg, "head_dim") or hidden // n_heads
    mlp_in = [lin for lin in linears if lin.role == "mlp_in"]
    mlp_out = [lin for lin in linears if lin.role == "mlp_out"]
    intermediate = mlp_out[0].d_in if mlp_out else (mlp_in[0].d_out if mlp_in else 4 * hidden)
    gated = any(lin.leaf in _GATE for lin in mlp_in) or len(mlp_in) >= 2
    act = str(_get(text_cfg, "hidden_act", "activation_function", "hidden_activation", default="gelu"))

    sliding = _get(text_cfg, "sliding_window")
    layer_types = getattr(text_cfg, "layer_types", None) or []
    if sliding and layer_types:
        sliding_layers = sum(1 for t in layer_types[:n_layers] if "sliding" in str(t))
    elif sliding and getattr(text_cfg, "use_sliding_window", True) is not False:
        sliding_layers = n_layers
    else:
        sliding_layers = 0
    if not sliding_layers:
        sliding = None

    return Arch(
        ref=ref, label=label, model_type=str(getattr(cfg, "model_type", "")), source=source,
        n_layers=int(n_layers), hidden=int(hidden), n_heads=int(n_heads), n_kv_heads=int(kv_heads), head_dim=int(head_dim),
        intermediate=int(intermediate), vocab=int(_get(text_cfg, "vocab_size")),
        max_positions=_get(text_cfg, "max_position_embeddings", "n_positions", "seq_length"), tied=bool(tied),
        params_total=int(total), params_embedding=int(embedding), params_lm_head=int(lm_head),
        params_layer_linear=int(layer_linear), params_layer_bias=int(layer_bias), params_other=int(other - 0),
        linears=tuple(linears), norm_type=norm_type, norms_per_layer=max(norms, 1), gated_mlp=bool(gated),
        python_gelu=act in _PYTHON_GELU, sliding_window=int(sliding) if sliding else None, sliding_layers=int(sliding_layers),
        hidden_dropout=float(_get(text_cfg, "resid_pdrop", "hidden_dropout", "hidden_dropout_prob", "dropout", default=0.0) or 0.0),
        attention_dropout=float(_get(text_cfg, "attn_pdrop", "attention_dropout", "attention_probs_dropout_prob", "dropout", default=0.0) or 0.0),
        encoder=encoder,
        sdpa=bool(getattr(type(model), "_supports_sdpa", True)),
        parallel_residual=bool(getattr(text_cfg, "use_parallel_residual", False) or getattr(text_cfg, "parallel_attn", False)
                               or str(getattr(cfg, "model_type", "")) in ("phi", "gptj", "cohere")),
        attn_softcap=getattr(text_cfg, "attn_logit_softcapping", None) is not None,
        logit_softcap=getattr(text_cfg, "final_logit_softcapping", None) is not None,
        published_params=published,
    )


def _is_encoder(cfg: Any) -> bool:
    """A bidirectional encoder (BERT-like: a masked-LM family used without is_decoder): transformers builds its LM-head
    class for AutoModelForCausalLM, but it is trained on every token at once and never generates."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return str(getattr(cfg, "model_type", "")) in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(cfg, "is_decoder", False)


def _nparams(mod: Any) -> int:
    return sum(p.numel() for p in mod.parameters())


def _role(name: str, d_in: int, d_out: int, hidden: int) -> str:
    leaf = name.rsplit(".", 1)[-1]
    path = name.lower()
    in_attn = "attn" in path or "attention" in path
    if leaf in _ATTN_IN and leaf not in _ATTN_OUT:
        return "attn_in"
    if leaf in _MLP_IN and leaf not in _ATTN_OUT:
        return "mlp_in"
    if in_attn:
        return "attn_out" if d_out == hidden else "attn_in"
    if leaf in ("down_proj", "fc2", "dense_4h_to_h", "w2", "fc_out", "wo"):
        return "mlp_out"
    return "mlp_out" if d_out == hidden else "mlp_in"

