"""What a training method does to the loaded model before training: LoRA adapters (new, or a previous run's adapter
trained further), k-bit preparation for QLoRA / 8-bit LoRA, and merging an adapter before a full fine-tune.

Built on peft; engine/training/run.py calls `prepare_for_method` once the model is loaded.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import LoraSettings, TrainConfig
from ..errors import ConfigError
from ..runs import EventLog

# Attention projection names across common architectures (for LoRA targets = "attention").
ATTENTION_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "c_attn", "c_proj", "query_key_value", "qkv_proj", "Wqkv", "out_proj")


def lora_targets(model: torch.nn.Module, spec: str) -> str | list[str]:
    """The `target_modules` of a LoRA config for `lora.targets`: "all-linear", "attention" or module names."""
    if spec == "all-linear":
        return "all-linear"
    leaf_names = {name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear) or "Linear" in type(mod).__name__}
    wanted = [n for n in ATTENTION_NAMES if n in leaf_names] if spec == "attention" else spec.split(",")
    missing = [n for n in wanted if n not in leaf_names]
    if not wanted or missing:
        raise ConfigError("lora.targets", spec, allowed_key="error.adapters.targets", names=", ".join(sorted(leaf_names)))
    return wanted


def apply_lora(model: Any, lora: LoraSettings) -> Any:
    """`model` with a new LoRA adapter of the given settings (a peft model; only the adapter trains)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora_targets(model, lora.targets),
        use_rslora=lora.use_rslora,
        use_dora=lora.use_dora,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def is_peft(model: Any) -> bool:
    """Whether `model` already carries a peft adapter (a `run:NAME` base of a LoRA run)."""
    from peft import PeftModel

    return isinstance(model, PeftModel)


def continue_adapter(model: Any, events: EventLog) -> Any:
    """Train the adapter of a previous LoRA run further (base_model = run:NAME), instead of stacking a second
    adapter on it: the result is one adapter on the first run's base (engine/models/references.py resolves it so).
    The adapter keeps its own shape (rank, alpha, targets): the form's LoRA settings do not apply."""
    n = 0
    for name, param in model.named_parameters():
        if "lora_" in name:
            param.requires_grad_(True)
            n += param.numel()
    if n == 0:
        raise ConfigError("base_model", "run:…", allowed_key="error.adapters.no_lora_weights")
    peft_cfg = model.peft_config[model.active_adapter]
    events.write("phase", phase=f"continuing the previous run's adapter (r={peft_cfg.r}, alpha={peft_cfg.lora_alpha}, "
                 f"{n:,} trainable weights); the LoRA settings of this form are not used")
    return model


def prepare_for_method(cfg: TrainConfig, model: Any, events: EventLog) -> Any:
    """The model to train for `cfg.method`: k-bit prepared (QLoRA, LoRA on 8-bit), with a LoRA adapter (new or
    continued), or with a previous run's adapter merged in for a full fine-tune."""
    if cfg.weights == "qlora" or (cfg.weights == "lora" and cfg.quant.mode == "8bit"):
        from peft import prepare_model_for_kbit_training

        from ..models.bnb_safety import prepare_for_training

        prepare_for_training(model)  # undo/prevent the bitsandbytes CPU repack (design.md §6 hazard)
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=cfg.grad_checkpointing, gradient_checkpointing_kwargs={"use_reentrant": False}
        )
    if cfg.weights in ("qlora", "lora"):  # dpo, orpo and grpo too, by their `tuning`
        return continue_adapter(model, events) if is_peft(model) else apply_lora(model, cfg.lora)
    if is_peft(model):  # full fine-tune of a LoRA run: train the merged weights
        events.write("phase", phase=f"merging the adapter of {cfg.base_model} into its base before the full fine-tune")
        model = model.merge_and_unload()
        model.requires_grad_(True)  # the adapter was loaded for inference, with every base weight frozen
    if cfg.grad_checkpointing:
        model.config.use_cache = False
    return model
