"""CompactLLM: the course's GPT-style decoder as a real transformers model.

A nanoGPT-sized decoder (pre-LayerNorm blocks, GELU MLP, learned absolute positions, tied input/output
embeddings, causal `scaled_dot_product_attention`) written as a `PreTrainedModel`, so that everything the app
does with Hub models works on it unchanged: `save_pretrained`/`from_pretrained` (also through the Auto
classes, registered on import), `generate` with the KV cache and left-padded batches, bitsandbytes 4/8-bit
loading, peft LoRA, `Trainer` and gradient checkpointing.

Module names follow Llama (`model.layers.N.self_attn.q_proj`, `mlp.up_proj`, ...) so that LoRA target lists,
bitsandbytes and the memory estimator find the same names as on any Hub decoder. Presets (architecture
numbers only) live in `presets/compact.yaml`; `load_compact_preset(name)` turns one into a `CompactConfig`.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
import yaml
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import slice_logits_to_keep
from transformers.utils import can_return_tuple

from ..errors import ModelLoadError
from ..hardware.cpu_bf16 import attention_in_fp32

PRESETS_FILE = Path(__file__).resolve().parents[2] / "presets" / "compact.yaml"
_NOT_CONFIG_KEYS = ("description",)  # preset metadata; keys starting with "pretrain_" are the pretraining recipe


class CompactConfig(PretrainedConfig):
    """Architecture of a CompactLLM. The defaults are the course's GPT (preset `compact-course`).

    transformers 5 turns every config subclass into a keyword-only dataclass: the annotated class attributes
    below are the fields, and unknown keyword arguments are accepted (stored as attributes) for compatibility.
    """

    model_type = "compact_llm"
    keys_to_ignore_at_inference: ClassVar[list[str]] = ["past_key_values"]

    vocab_size: int = 8192  # a small BPE vocabulary: enough for English text, keeps the embedding table small
    max_position_embeddings: int = 1024  # context length (nanoGPT's block_size); learned positions cannot extrapolate
    hidden_size: int = 384  # width C; 6 heads x 64 dims, the nanoGPT "baby GPT" shape
    num_hidden_layers: int = 6  # depth; 6 blocks train in minutes on one GPU
    num_attention_heads: int = 6  # head_dim = 384 / 6 = 64, the usual head size
    intermediate_size: int = 1536  # MLP width = 4 x hidden, as in GPT-2
    dropout: float = 0.1  # small data overfits fast; use 0.0 for pretraining on large corpora or for tests
    layer_norm_eps: float = 1e-5  # PyTorch LayerNorm default, as in GPT-2
    initializer_range: float = 0.02  # GPT-2 init std; residual projections get 0.02/sqrt(2*layers)
    bias: bool = True  # biases in Linear and LayerNorm, like GPT-2 (nanoGPT: False is a bit faster/better)
    tie_word_embeddings: bool = True  # lm_head shares the token embedding: fewer parameters, better small models
    bos_token_id: int | None = None  # special ids come from the tokenizer trained for the preset
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    use_cache: bool = True  # generate with a KV cache by default

    def __post_init__(self, **kwargs: Any) -> None:
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads ({self.num_attention_heads}).")
        super().__post_init__(**kwargs)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class CompactAttention(nn.Module):
    """Multi-head causal self-attention with a KV cache."""

    def __init__(self, config: CompactConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx  # which slot of the Cache holds this layer's keys/values
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.dropout = config.dropout
        C = config.hidden_size
        self.q_proj = nn.Linear(C, C, bias=config.bias)
        self.k_proj = nn.Linear(C, C, bias=config.bias)
        self.v_proj = nn.Linear(C, C, bias=config.bias)
        self.o_proj = nn.Linear(C, C, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, C)
        attention_mask: torch.Tensor | None,  # (B, 1, T, S) bool or additive float, or None = plain causal
        past_key_values: Cache | None = None,
    ) -> torch.Tensor:
        B, T, C = x.shape
        # (B, T, C) -> (B, nh, T, hd)
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        if past_key_values is not None:
            # append this step's keys/values; returns all of them so far: (B, nh, S, hd), S = past + T
            k, v = past_key_values.update(k, v, self.layer_idx)
        dtype, upcast = q.dtype, attention_in_fp32(q)
        if upcast:  # training under CPU bf16: fp32 attention is faster there (engine/hardware/cpu_bf16.py)
            q, k, v = q.float(), k.float(), v.float()
            if attention_mask is not None and attention_mask.is_floating_point():
                attention_mask = attention_mask.float()
        # create_causal_mask returns None only when a plain causal mask is right: no padding and either a
        # single query (decode step: attend to everything) or no past (T == S: SDPA's top-left causal mask)
        with torch.autocast("cpu", enabled=False) if upcast else contextlib.nullcontext():
            y = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=attention_mask,
                dropout_p=self.dropout if self.training else 0.0,
                is_causal=attention_mask is None and T > 1,
            ).to(dtype)  # (B, nh, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side
        return self.resid_dropout(self.o_proj(y))


class CompactMLP(nn.Module):
    def __init__(self, config: CompactConfig) -> None:
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.bias)
        self.act = nn.GELU()
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        return self.dropout(self.down_proj(self.act(self.up_proj(x))))


class CompactBlock(GradientCheckpointingLayer):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x)).

    Subclassing `GradientCheckpointingLayer` is how transformers 5 does checkpointing: it wraps `forward`
    and, when enabled and training, recomputes it in backward (and drops the cache). The hidden state must
    therefore be passed positionally.
    """

    def __init__(self, config: CompactConfig, layer_idx: int) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.bias)
        self.self_attn = CompactAttention(config, layer_idx)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.bias)
        self.mlp = CompactMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, T, C)
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Any,  # use_cache etc., read by the checkpointing wrapper
    ) -> torch.Tensor:
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states), attention_mask, past_key_values)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))  # (B, T, C)


class CompactPreTrainedModel(PreTrainedModel):
    config_class = CompactConfig
    config: CompactConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules: ClassVar[list[str]] = ["CompactBlock"]  # device_map="auto" keeps a block (and its residual) on one device
    _skip_keys_device_placement: ClassVar[list[str]] = ["past_key_values"]
    _supports_sdpa = True  # we call F.scaled_dot_product_attention; eager masks (additive floats) work too

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # Linear/Embedding ~ N(0, initializer_range), LayerNorm = (1, 0): the library default. It runs on children
        # before parents, so the parents below can override: GPT-2 scales the projections that write into
        # the residual stream by 1/sqrt(2 * layers) (two residual additions per block).
        super()._init_weights(module)
        std = self.config.initializer_range / math.sqrt(2 * self.config.num_hidden_layers)
        if isinstance(module, CompactAttention):
            init.normal_(module.o_proj.weight, mean=0.0, std=std)
        elif isinstance(module, CompactMLP):
            init.normal_(module.down_proj.weight, mean=0.0, std=std)


class CompactModel(CompactPreTrainedModel):
    """The decoder stack without the language-model head: returns the final normalized hidden states."""

    def __init__(self, config: CompactConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(CompactBlock(config, i) for i in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.bias)
        self.gradient_checkpointing = False
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, past + T), 1 = real token, 0 = padding
        position_ids: torch.LongTensor | None = None,  # (B, T) or (1, T)
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,  # (B, T, C)
        use_cache: bool | None = None,
        cache_position: torch.LongTensor | None = None,  # (T,) absolute slots in the cache (older API)
        **kwargs: Any,
    ) -> BaseModelOutputWithPast:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, C)
        T = inputs_embeds.shape[1]

        if use_cache is None:  # training (Trainer) never reads a cache back: do not keep one unless asked
            use_cache = self.config.use_cache and not self.training
        if self.gradient_checkpointing and self.training:
            use_cache = False  # recomputing a block in backward would write its keys/values twice
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        past = past_key_values.get_seq_length() if past_key_values is not None else 0

        max_pos = self.config.max_position_embeddings
        if past + T > max_pos:
            raise ValueError(
                f"Input is {past + T} tokens long (cached {past} + new {T}) but this model has only {max_pos} "
                "positions (max_position_embeddings). Shorten the prompt or lower max_new_tokens."
            )

        if position_ids is None:
            if attention_mask is not None and attention_mask.ndim == 2:
                # left padding: the first real token of every row is position 0, pads get 0 (they are masked)
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -T:]  # (B, T)
            elif cache_position is not None:
                position_ids = cache_position.unsqueeze(0)  # (1, T)
            else:
                position_ids = torch.arange(past, past + T, device=inputs_embeds.device).unsqueeze(0)  # (1, T)

        # 4D mask for this step (B, 1, T, past + T) from causality + padding, in the form the configured attention
        # implementation expects (bool for sdpa, additive float for eager), or None when SDPA's is_causal suffices
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )

        hidden_states = self.dropout(inputs_embeds + self.embed_positions(position_ids))  # (B, T, C)
        for block in self.layers:
            hidden_states = block(hidden_states, attention_mask=mask, past_key_values=past_key_values, use_cache=use_cache)
        hidden_states = self.norm(hidden_states)  # (B, T, C)
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, past_key_values=past_key_values if use_cache else None)


class CompactForCausalLM(CompactPreTrainedModel, GenerationMixin):
    """CompactModel + a linear head over the vocabulary (tied to the token embedding by default)."""

    # transformers 5 declares tying as {target: source}; it is applied when config.tie_word_embeddings is True
    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: CompactConfig) -> None:
        super().__init__(config)
        self.model = CompactModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (B, T), the inputs themselves; -100 = not scored
        use_cache: bool | None = None,
        cache_position: torch.LongTensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,  # generate asks for the last position only
        **kwargs: Any,  # num_items_in_batch (Trainer, for exact loss with gradient accumulation) ...
    ) -> CausalLMOutputWithPast:
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            cache_position=cache_position,
        )
        hidden_states = slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)
        logits = self.lm_head(hidden_states)  # (B, T', V)

        loss = None
        if labels is not None:
            # shifts labels left (token t predicts t+1), ignores -100, sums / num_items_in_batch when given
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=outputs.past_key_values)


def _register() -> None:
    """Make AutoConfig / AutoModelForCausalLM know "compact_llm". `exist_ok` makes re-import (or a reload, which
    creates new class objects) harmless: the latest classes win."""
    AutoConfig.register(CompactConfig.model_type, CompactConfig, exist_ok=True)
    AutoModelForCausalLM.register(CompactConfig, CompactForCausalLM, exist_ok=True)


_register()


def compact_presets() -> dict[str, dict[str, Any]]:
    """The built-in presets as written in presets/compact.yaml (with description and pretrain_steps)."""
    with PRESETS_FILE.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_compact_preset(name: str) -> CompactConfig:
    """The `CompactConfig` of a built-in preset, e.g. "compact-mini" or "compact-course"."""
    presets = compact_presets()
    if name not in presets:
        raise ModelLoadError(f"Unknown compact preset {name!r}. Available presets: {', '.join(presets)}.")
    fields = {k: v for k, v in presets[name].items() if k not in _NOT_CONFIG_KEYS and not k.startswith("pretrain_")}
    return CompactConfig(**fields)


def new_compact_model(preset: str, tokenizer: Any, *, vocab_size: int, seed: int) -> CompactForCausalLM:
    """A compact preset with random weights (seeded) for `tokenizer`: its special-token ids and a vocabulary of
    `vocab_size` (the tokenizer's own size from scratch, a teacher's output size for a distillation student).
    Also sets `tokenizer.model_max_length` to the preset's context."""
    config = load_compact_preset(preset)
    tokenizer.model_max_length = config.max_position_embeddings
    config.vocab_size = vocab_size
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(seed)
    return CompactForCausalLM(config)
