"""Load a causal LM and its tokenizer from any model reference the app accepts, quantized or not.

References (``builtin:NAME``, ``run:NAME``, ``run:NAME/merged``, a local folder, a Hub id) are resolved by
engine/models/references.py; Hub ids go to ``from_pretrained``, and ``HF_TOKEN`` is picked up from the environment
by huggingface_hub, never logged here - except on a shared app, where visitors' loads never use the server's token
and never run remote code (engine/sharing.py).

Quantization (`QuantSettings`): none, bitsandbytes 8-bit or 4-bit (nf4/fp4, double quant, compute dtype), or
torch int8 dynamic quantization for CPU inference (engine/models/cpu_quant.py). The dtype policy lives in
engine/hardware/device.py. Every 4-bit model returned here has bitsandbytes' CPU repacking switched off
(engine/models/bnb_safety.py, design.md §6), so a model used in the playground can still be trained.

Placement: `device_map="auto"` lets accelerate spread a model that does not fit the GPU over GPU, CPU RAM and
disk (the disk part goes to an offload folder under the runs dir); `LoadedModel.placement()` says what lives where
(engine/hardware/placement.py). On a CPU-only machine "auto" is ignored: everything is on the CPU anyway.

`load_model` loads afresh on every call; the playground goes through the process-wide cache of loaded models,
`MODEL_CACHE` (engine/models/cache.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import QuantSettings
from ..errors import ConfigError, ModelLoadError
from ..hardware.device import DeviceInfo, detect_device, dtype_name, resolve_dtype
from ..hardware.placement import summarize_device_map
from ..refs import default_runs_dir
from ..sharing import check_remote_code, is_shared, token_kwargs
from .references import model_type_of, resolve_adapter, resolve_model, resolve_offload_folder

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    """A model ready for generation or training, with what is needed to describe and reuse it."""

    model: Any  # transformers PreTrainedModel, or a peft PeftModel wrapping one
    tokenizer: Any  # PreTrainedTokenizerBase, padding_side="left", pad token and chat template set
    ref: str  # the reference the caller passed
    device: DeviceInfo
    dtype: torch.dtype  # dtype of the unquantized parts (and the compute dtype of quantized layers)
    quant: QuantSettings
    load_seconds: float
    footprint_gib: float  # model.get_memory_footprint(): parameters + buffers
    where: str  # human-readable: where the weights came from and where they run
    adapter: str | None = None  # the adapter folder/id applied on top of the base, if any
    config_path: Path | None = None  # local config.json of the base weights (for the memory estimator)
    # True: 4-bit layers may repack for fast CPU inference; call bnb_safety.prepare_for_training before training
    cpu_repack_allowed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def placement(self) -> dict[str, str]:
        """What lives where: {module group: "device · storage"}, e.g. {"model.layers.0-5": "cuda:0 · 4-bit nf4
        (bitsandbytes)", "lm_head": "disk (offloaded) · fp16"}. Built from `hf_device_map` when accelerate
        placed the model (device_map="auto"), from the tensors otherwise."""
        from ..hardware.placement import describe_placement
        from .cpu_quant import is_int8_dynamic

        return describe_placement(self.model, is_int8_dynamic=is_int8_dynamic)

    @property
    def context_length(self) -> int | None:
        """Positions the model can attend to (max_position_embeddings / n_positions), None if unknown."""
        config = getattr(self.model, "config", None)
        for name in ("max_position_embeddings", "n_positions", "seq_length"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return None



# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def hub_error(exc: Exception, what: str, location: str) -> ModelLoadError:
    """Translate the many ways from_pretrained fails into one message a person can act on."""
    text = str(exc)
    if "trust_remote_code" in text and is_shared():
        return ModelLoadError(key="playground.error.remote_code_shared", model=location)
    if "trust_remote_code" in text:
        return ModelLoadError(key="playground.error.remote_code", model=location)
    # `what` is one of the keys of playground.load_what (model, tokenizer of, LoRA adapter)
    if isinstance(exc, OSError):
        return ModelLoadError(key=f"playground.error.not_found_{what}", model=repr(location),
                              details=text.splitlines()[0] if text else type(exc).__name__)
    return ModelLoadError(key=f"playground.error.load_failed_{what}", model=repr(location), details=f"{type(exc).__name__}: {text[:500]}")


def tokenizer_from(location: str, trust_remote_code: bool) -> Any:
    """The tokenizer in `location` (folder or Hub id), with chat template and left padding."""
    from transformers import AutoTokenizer

    from .tokenizer import ensure_chat_template

    try:
        # shared mode: never with remote code, never with the server's Hub token (engine/sharing.py)
        check_remote_code(trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code, **token_kwargs())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise hub_error(exc, "tokenizer", location) from exc
    ensure_chat_template(tokenizer)
    # Decoder-only generation continues from the last position: batches must be padded on the left.
    tokenizer.padding_side = "left"
    return tokenizer


def has_tokenizer(folder: Path) -> bool:
    """Whether `folder` holds tokenizer files (a run's adapter/ carries the tokenizer it was trained with)."""
    return any(
        (folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    )


def load_tokenizer(
    ref: str,
    *,
    runs_dir: Path | None = None,
    trust_remote_code: bool = False,
    allow_local_paths: bool = False,
) -> Any:
    """The tokenizer of a model reference (same rules as `load_model`), with chat template and pad token."""
    runs_dir = Path(runs_dir or default_runs_dir())
    source = resolve_model(ref, runs_dir, allow_local_paths)
    # A run's adapter folder carries the tokenizer it was trained with (chat template, pad token).
    if source.adapter_dir is not None and has_tokenizer(source.adapter_dir):
        return tokenizer_from(str(source.adapter_dir), trust_remote_code)
    return tokenizer_from(source.location, trust_remote_code)


def bnb_config(quant: QuantSettings, compute_dtype: torch.dtype, *, cpu_offload: bool = False, quant_storage: torch.dtype | None = None) -> Any:
    """The transformers BitsAndBytesConfig for `quant` (None for modes that are not bitsandbytes).

    cpu_offload: keep modules that device_map="auto" puts on the CPU/disk unquantized in fp32 (bitsandbytes
    refuses to place quantized weights there, and transformers refuses the map without this flag).
    quant_storage: the dtype the packed 4-bit weights are stored in (bitsandbytes' default uint8). FSDP shards only
    float tensors and flattens the tensors of a unit into one: QLoRA under FSDP stores them in the compute dtype
    (peft's and bitsandbytes' FSDP-QLoRA guides).
    """
    if quant.mode not in ("8bit", "4bit"):
        return None
    from transformers import BitsAndBytesConfig

    if quant.mode == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_enable_fp32_cpu_offload=cpu_offload)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant.quant_type,
        bnb_4bit_use_double_quant=quant.double_quant,
        bnb_4bit_compute_dtype=compute_dtype,
        bnb_4bit_quant_storage=quant_storage or torch.uint8,
        llm_int8_enable_fp32_cpu_offload=cpu_offload,
    )


def load_model(
    ref: str,
    quant: QuantSettings | None = None,
    *,
    runs_dir: Path | None = None,
    trust_remote_code: bool = False,
    adapter: str | None = None,
    device: DeviceInfo | None = None,
    allow_local_paths: bool = False,
    dtype: torch.dtype | None = None,
    device_map: str | dict[str, Any] | None = None,
    allow_cpu_repack: bool = False,
    offload_folder: Path | None = None,
    max_memory: dict[int | str, int | str] | None = None,
    quant_storage: torch.dtype | None = None,
) -> LoadedModel:
    """Load model + tokenizer for `ref` (engine/models/references.py lists the reference forms).

    quant: None = unquantized, except for a QLoRA run (run:NAME) which loads its base the way it was
    trained (4-bit). dtype overrides the policy dtype of the unquantized parts (resolve_dtype of
    quant.compute_dtype otherwise). device_map: default {"": 0} on CUDA, the CPU otherwise; "auto" spreads
    a model over the GPUs, CPU RAM and disk with accelerate (ignored on a CPU-only machine); what went where
    is in `LoadedModel.placement()`. offload_folder: where "auto" puts weights that fit neither GPU nor RAM (default
    `<runs>/_offload/`; it must lie inside the runs dir unless allow_local_paths). max_memory: accelerate's
    per-device budget for "auto", e.g. {0: "6GiB", "cpu": "12GiB"}. quant_storage: the storage dtype of 4-bit weights
    (`bnb_config`; the compute dtype for QLoRA under FSDP). quant.mode "int8-dynamic" quantizes every
    Linear with torch for CPU inference (ConfigError on a GPU), merging an adapter first. adapter: a LoRA
    adapter (run:NAME, Hub id, or folder under the same path policy) applied on top, unmerged.
    allow_cpu_repack: opt in to bitsandbytes' packed CPU inference layout for 4-bit models (1.2-5x faster
    CPU decoding, measured in engine/models/bnb_safety.py's docstring) for models that are never trained; the
    default keeps every 4-bit model safe to train (engine/models/bnb_safety.py).
    Raises ModelLoadError (or ConfigError for impossible dtype choices) with a message for the user.
    Every call loads afresh; `MODEL_CACHE.get_or_load` (engine/models/cache.py) takes the same arguments and caches.
    """
    from transformers import AutoModelForCausalLM

    from . import compact  # noqa: F401  (imported for its side effect: registers compact_llm with the Auto classes)
    from .bnb_safety import disable_cpu_repack

    t0 = time.perf_counter()
    runs_dir = Path(runs_dir or default_runs_dir())
    device = device or detect_device()
    source = resolve_model(ref, runs_dir, allow_local_paths)
    if quant is None:
        quant = source.run_quant or QuantSettings(mode="none")
    # the family rule (fp32 instead of fp16 for Gemma, T5, ... on a GPU without bf16) needs the config's model_type
    model_type = model_type_of(ref, runs_dir, allow_local_paths=allow_local_paths) if device.gpu_policy else None
    compute_dtype = resolve_dtype(quant.compute_dtype, device, field="quant.compute_dtype", model_type=model_type)
    model_dtype = dtype or compute_dtype
    int8_dynamic = quant.mode == "int8-dynamic"
    if int8_dynamic:
        from .cpu_quant import check_device

        check_device(device)  # before any weights are read: a GPU user gets the message at once
        if model_dtype != torch.float32:
            raise ConfigError.of("dtype", dtype_name(model_dtype), "int8_dtype")
    if device_map == "auto" and device.kind == "cpu":
        device_map = None  # everything lands on the CPU anyway; accelerate's hooks would only slow it down

    if quant.mode in ("8bit", "4bit"):
        _check_bnb()
    if quant.mode == "8bit" and device.kind == "cpu":
        _quiet_int8_cast_warning()
    check_remote_code(trust_remote_code)  # shared mode: no Hub repo's Python runs here (engine/sharing.py)
    kwargs: dict[str, Any] = {"dtype": model_dtype, "trust_remote_code": trust_remote_code, **token_kwargs()}
    qconfig = bnb_config(quant, compute_dtype, cpu_offload=device_map == "auto", quant_storage=quant_storage)
    if qconfig is not None:
        kwargs["quantization_config"] = qconfig
    if device_map == "auto":
        kwargs["offload_folder"] = str(resolve_offload_folder(offload_folder, runs_dir, allow_local_paths))
        from ..hardware.t4 import emulated_max_memory

        max_memory = max_memory or emulated_max_memory()  # COMPACT_LAB_EMULATE_T4=1: a T4's GPU budget
        if max_memory:
            kwargs["max_memory"] = max_memory
    if device_map is not None:
        kwargs["device_map"] = device_map
    elif device.kind == "cuda":
        # One GPU per process under DDP (accelerate launch): rank k loads onto cuda:LOCAL_RANK, not all onto cuda:0.
        from ..hardware.distributed import local_rank

        kwargs["device_map"] = {"": local_rank()}
    elif qconfig is not None:
        # bitsandbytes quantizes while placing weights; name the CPU so it does not look for a GPU.
        kwargs["device_map"] = {"": "cpu"}

    try:
        model = AutoModelForCausalLM.from_pretrained(source.location, **kwargs)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError) as exc:
        if isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower():
            raise ModelLoadError(key="playground.error.load_oom", model=ref) from exc
        raise hub_error(exc, "model", source.location) from exc

    adapter_location = str(source.adapter_dir) if source.adapter_dir is not None else None
    if adapter:
        if adapter_location is not None:
            raise ModelLoadError(key="playground.error.adapter_twice", model=ref)
        adapter_location = resolve_adapter(adapter, runs_dir, allow_local_paths)
    if adapter_location is not None:
        model = _apply_adapter(model, adapter_location)
        if int8_dynamic:
            # Quantized layers cannot carry an unmerged LoRA (peft reads `.weight` of the base layer, which a
            # dynamic int8 Linear does not have): fold the adapter into the fp32 weights first.
            model = model.merge_and_unload()
    if int8_dynamic:
        from .cpu_quant import quantize_int8_dynamic

        model = quantize_int8_dynamic(model)

    tok_location = source.location
    if source.adapter_dir is not None and has_tokenizer(source.adapter_dir):
        tok_location = str(source.adapter_dir)
    tokenizer = tokenizer_from(tok_location, trust_remote_code)
    gen_config = getattr(model, "generation_config", None)
    if gen_config is not None and gen_config.pad_token_id is None:
        gen_config.pad_token_id = tokenizer.pad_token_id

    if quant.mode == "4bit" and not allow_cpu_repack:
        # design.md §6: without this, the first CPU inference repacks the 4-bit weights and any later
        # training on this model object gets silently wrong gradients.
        disable_cpu_repack(model)
    model.eval()

    if int8_dynamic:
        from .cpu_quant import footprint_bytes

        footprint = footprint_bytes(model) / 2**30  # get_memory_footprint misses the packed int8 weights
    else:
        footprint = model.get_memory_footprint() / 2**30
    where_device = "cpu" if device.kind == "cpu" and device_map is None else f"{device.kind} ({device.name})"
    split = summarize_device_map(getattr(model, "hf_device_map", None)) if device_map == "auto" else ""
    if split:
        where_device += f", {split}"
    quant_text = {"none": "unquantized", "8bit": "8bit", "int8-dynamic": "int8 dynamic"}.get(
        quant.mode, f"4-bit {quant.quant_type}"
    )
    if int8_dynamic and adapter_location:
        quant_text += " (adapter merged)"
    loaded = LoadedModel(
        model=model,
        tokenizer=tokenizer,
        ref=ref,
        device=device,
        dtype=model_dtype,
        quant=quant,
        load_seconds=time.perf_counter() - t0,
        footprint_gib=footprint,
        where=f"{source.description}{f' + LoRA adapter {adapter}' if adapter else ''}, {quant_text} {dtype_name(model_dtype)} on {where_device}",
        adapter=adapter_location,
        config_path=(Path(source.location) / "config.json") if source.is_local else None,
        cpu_repack_allowed=quant.mode == "4bit" and allow_cpu_repack,
    )
    log.info("loaded %s in %.1fs: %s, %.3f GiB", ref, loaded.load_seconds, loaded.where, footprint)
    return loaded


BNB_INSTALL = "pip install bitsandbytes==0.50.2"  # the version requirements.txt pins


def _check_bnb() -> None:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as exc:  # requirements pin it; this is for hand-made environments
        raise ModelLoadError(key="playground.error.needs_bnb", command=BNB_INSTALL) from exc


class _DropInt8CastWarning(logging.Filter):
    """bitsandbytes logs "MatMul8bitLt: inputs will be cast from torch.float32 to float16" on *every* 8-bit
    matmul with fp32 inputs (always the case on CPU): one line per layer per generated token would flood
    the server log. The cast is expected there, so the message carries no information."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast")


_INT8_CAST_FILTER = _DropInt8CastWarning()


def _quiet_int8_cast_warning() -> None:
    logger = logging.getLogger("bitsandbytes.autograd._functions")
    if _INT8_CAST_FILTER not in logger.filters:  # idempotent: one filter however many loads
        logger.addFilter(_INT8_CAST_FILTER)


def _apply_adapter(model: Any, location: str) -> Any:
    from peft import PeftModel

    try:
        return PeftModel.from_pretrained(model, location, is_trainable=False, **token_kwargs())
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "size mismatch" in str(exc):
            raise ModelLoadError(key="playground.error.adapter_mismatch", adapter=repr(location)) from exc
        raise hub_error(exc, "adapter", location) from exc
