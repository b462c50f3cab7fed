"""Load a causal LM and its tokenizer from any model reference the app accepts, quantized or not.

Model references (`ref`):

- ``builtin:NAME``   a built-in compact model, pretrained once into ``<runs>/_builtin/NAME/model``
- ``run:NAME``       a finished run ``<runs>/NAME``: its ``adapter/`` (peft LoRA, applied on the run's base
                     model, not merged) or its ``model/`` (full fine-tune / scratch)
- ``run:NAME/merged`` the 16-bit model saved by merging that run's adapter (``<runs>/NAME/merged``)
- a local folder     only with ``allow_local_paths=True`` (the CLI) or when it lies inside the runs folder:
                     on a public link, user input must never name an arbitrary server path
- a Hub id           ``owner/name`` (or a legacy single name such as ``gpt2``), via ``from_pretrained``;
                     ``HF_TOKEN`` is picked up from the environment by huggingface_hub, never logged here

Quantization (`QuantSettings`): none, bitsandbytes 8-bit or 4-bit (nf4/fp4, double quant, compute dtype), or
torch int8 dynamic quantization for CPU inference (engine/models/cpu_quant.py). The dtype policy lives in
engine/hardware/device.py. Every 4-bit model returned here has bitsandbytes' CPU repacking switched off
(engine/models/bnb_safety.py, design.md §6), so a model used in the playground can still be trained.

Placement: `device_map="auto"` lets accelerate spread a model that does not fit the GPU over GPU, CPU RAM and
disk (the disk part goes to an offload folder under the runs dir); `LoadedModel.placement()` says what lives where
(engine/hardware/placement.py). On a CPU-only machine "auto" is ignored: everything is on the CPU anyway.

`ModelCache` keeps loaded models so the playground does not reload on every message. `MODEL_CACHE` is the
one process-wide instance: it is shared by every browser session and thread, and guarded by its lock.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import QuantSettings
from ..errors import ConfigError, EngineError, ModelLoadError
from ..hardware.device import DeviceInfo, detect_device, dtype_name, resolve_dtype
from ..hardware.placement import summarize_device_map
from ..refs import (
    BUILTIN_PREFIX,
    HUB_MODEL_ID_RE,
    MERGED_SUFFIX,
    RUN_PREFIX,
    default_runs_dir,
    is_valid_run_name,
    is_within,
    path_exists,
    run_ref_dir,
)

log = logging.getLogger(__name__)

_MAX_REF_DEPTH = 4  # run:A whose base is run:B whose base is ... (guards against a cycle)


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

        return describe_placement(self.model)

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
# Reference resolution (no torch work: cheap, and testable on its own)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """Where the weights of a reference are: a local folder or a Hub id, and optionally an adapter."""

    location: str  # local folder (absolute) or Hub id
    is_local: bool
    description: str
    adapter_dir: Path | None = None  # peft adapter to apply on top (run:NAME with adapter/)
    base: _Source | None = None  # for adapter runs: the base model's source
    run_quant: QuantSettings | None = None  # quantization the run trained with (qlora -> 4bit)


def builtin_model_dir(name: str, runs_dir: Path | None = None) -> Path:
    """Folder of the pretrained built-in compact model NAME: ``<runs>/_builtin/NAME/model``."""
    if not is_valid_run_name(name):
        raise ModelLoadError(f"Built-in model name {name!r} is not valid: use letters, digits, '-', '_' and '.'.")
    return Path(runs_dir or default_runs_dir()) / "_builtin" / name / "model"


def _read_run_base(run_dir: Path) -> tuple[str | None, QuantSettings | None]:
    """Base model reference and quantization of a run, from its config.yaml (None when unreadable)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return None, None
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    base = data.get("base_model")
    quant = None
    if data.get("method") == "qlora":
        q = data.get("quant") or {}
        try:
            # The weight format follows the run; the compute dtype follows the device it is loaded on now
            # (a run trained in bf16 on an A100 must still load on a T4).
            quant = QuantSettings(
                mode="4bit", quant_type=q.get("quant_type", "nf4"), double_quant=bool(q.get("double_quant", True))
            )
        except EngineError:
            quant = QuantSettings(mode="4bit")
    return (str(base) if base else None), quant


def _resolve(ref: str, runs_dir: Path, allow_local_paths: bool, depth: int = 0) -> _Source:
    if depth > _MAX_REF_DEPTH:
        raise ModelLoadError(f"Model reference {ref!r} refers to runs that refer to each other too deeply (a cycle?).")
    ref = (ref or "").strip()
    if not ref:
        raise ModelLoadError("No model given: pick a built-in model, a finished run, or type a Hugging Face model id.")

    if ref.startswith(BUILTIN_PREFIX):
        name = ref[len(BUILTIN_PREFIX) :]
        folder = builtin_model_dir(name, runs_dir)
        if not (folder / "config.json").exists():
            _check_known_preset(name)
            raise ModelLoadError(
                f"The built-in model {name} has not been pretrained yet: start a 'scratch' run with base model "
                f"builtin:{name} (or any fine-tune of it, which pretrains it first), or run "
                f"`python -m engine prepare-builtin {name}`. It takes a few minutes on a CPU."
            )
        return _Source(str(folder), True, f"built-in {name}")

    if ref.startswith(RUN_PREFIX):
        name = ref[len(RUN_PREFIX) :]
        if name.endswith(MERGED_SUFFIX):  # run:NAME/merged: the 16-bit model made by merging the run's adapter
            name = name[: -len(MERGED_SUFFIX)]
            merged = run_ref_dir(name, runs_dir) / "merged"
            if not (merged / "config.json").exists():
                raise ModelLoadError(f"Run {name!r} has no merged model yet: merge its adapter first (Fine-tune → Merge adapter).")
            return _Source(str(merged), True, f"run {name} (merged)")
        run_dir = run_ref_dir(name, runs_dir)
        if not run_dir.is_dir():
            raise ModelLoadError(f"There is no run named {name!r} in {runs_dir}.")
        adapter_dir = run_dir / "adapter"
        model_dir = run_dir / "model"
        if (adapter_dir / "adapter_config.json").exists():
            base_ref, run_quant = _read_run_base(run_dir)
            if not base_ref:
                base_ref = _adapter_base(adapter_dir)
            if not base_ref:
                raise ModelLoadError(
                    f"Run {name!r} has an adapter but neither its config.yaml nor its adapter names a base model."
                )
            # The run's config.yaml was validated against the path policy when the run was created, and
            # an adapter_config written by our trainer names a folder it loaded: trust both here.
            base = _resolve(base_ref, runs_dir, True, depth + 1)
            if base.adapter_dir is not None and base.base is not None:
                # A LoRA run trained on another LoRA run continued that run's adapter (engine/training/run.py
                # `_continue_adapter`), so its adapter already holds the first one: both share the first base.
                base = base.base
            return _Source(
                base.location,
                base.is_local,
                f"run {name} (LoRA adapter on {base.description})",
                adapter_dir=adapter_dir,
                base=base,
                run_quant=run_quant,
            )
        if (model_dir / "config.json").exists():
            return _Source(str(model_dir), True, f"run {name}")
        raise ModelLoadError(
            f"Run {name!r} has no final model yet (no adapter/ or model/ folder): it is still running, or it was "
            "stopped or failed before saving. Resume it from the run history, then load it again."
        )

    path = Path(ref).expanduser()
    # Anything that exists on disk is a path (from_pretrained would prefer the folder over a Hub id of the
    # same spelling), and so is anything that looks like one.
    if path_exists(path) or path.is_absolute() or ref.startswith((".", "~", os.sep)):
        if not (allow_local_paths or is_within(path, runs_dir)):
            raise ModelLoadError(
                f"{ref!r} is a path on the server; only built-in models, runs (run:NAME) and Hugging Face ids can "
                "be loaded here. Use the command line to load a model from a local folder."
            )
        if not path.is_dir():
            raise ModelLoadError(f"Model folder {ref!r} does not exist.")
        if not (path / "config.json").exists():
            raise ModelLoadError(f"{ref!r} is not a model folder (no config.json in it).")
        return _Source(str(path.resolve()), True, f"folder {path.resolve()}")

    if not HUB_MODEL_ID_RE.match(ref) or ".." in ref:
        raise ModelLoadError(
            f"{ref!r} is not a model reference: use builtin:NAME, run:NAME or a Hugging Face id such as "
            "'Qwen/Qwen2.5-0.5B-Instruct'."
        )
    return _Source(ref, False, f"Hugging Face {ref}")


def _check_known_preset(name: str) -> None:
    from .compact import compact_presets

    presets = compact_presets()
    if name not in presets:
        raise ModelLoadError(f"Unknown built-in model {name!r}. Built-in models: {', '.join(presets)}.")


def _adapter_base(adapter_dir: Path) -> str | None:
    try:
        data = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    base = data.get("base_model_name_or_path")
    return str(base) if base else None


def _resolve_adapter(adapter: str, runs_dir: Path, allow_local_paths: bool) -> str:
    """An adapter reference: run:NAME (its adapter/), a local adapter folder (policy as for models) or a Hub id."""
    if adapter.startswith(RUN_PREFIX):
        run_dir = run_ref_dir(adapter[len(RUN_PREFIX) :], runs_dir)
        folder = run_dir / "adapter"
        if not (folder / "adapter_config.json").exists():
            raise ModelLoadError(
                f"Run {adapter[len(RUN_PREFIX) :]!r} has no LoRA adapter (no adapter/adapter_config.json)."
            )
        return str(folder)
    path = Path(adapter).expanduser()
    if path_exists(path) or path.is_absolute() or adapter.startswith((".", "~", os.sep)):
        if not (allow_local_paths or is_within(path, runs_dir)):
            raise ModelLoadError(
                f"{adapter!r} is a path on the server; name an adapter as run:NAME or a Hugging Face id."
            )
        if not (path / "adapter_config.json").exists():
            raise ModelLoadError(f"{adapter!r} is not a LoRA adapter folder (no adapter_config.json).")
        return str(path.resolve())
    if not HUB_MODEL_ID_RE.match(adapter) or ".." in adapter:
        raise ModelLoadError(f"{adapter!r} is not an adapter reference (run:NAME or a Hugging Face id).")
    return adapter


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def _hub_error(exc: Exception, what: str, location: str) -> ModelLoadError:
    """Translate the many ways from_pretrained fails into one message a person can act on."""
    text = str(exc)
    if "trust_remote_code" in text:
        return ModelLoadError(
            f"{location} ships its own Python code. Enable 'Trust remote code' to load it, but only if you "
            "trust its authors: that code runs on this machine."
        )
    if isinstance(exc, OSError):
        return ModelLoadError(
            f"Could not load the {what} {location!r}: not found or no internet (offline, wrong id, private or "
            f"gated model without a token in HF_TOKEN). Details: {text.splitlines()[0] if text else type(exc).__name__}"
        )
    return ModelLoadError(f"Could not load the {what} {location!r}: {type(exc).__name__}: {text[:500]}")


def _tokenizer_from(location: str, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    from .tokenizer import ensure_chat_template

    try:
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _hub_error(exc, "tokenizer of", location) from exc
    ensure_chat_template(tokenizer)
    # Decoder-only generation continues from the last position: batches must be padded on the left.
    tokenizer.padding_side = "left"
    return tokenizer


def _has_tokenizer(folder: Path) -> bool:
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
    source = _resolve(ref, runs_dir, allow_local_paths)
    # A run's adapter folder carries the tokenizer it was trained with (chat template, pad token).
    if source.adapter_dir is not None and _has_tokenizer(source.adapter_dir):
        return _tokenizer_from(str(source.adapter_dir), trust_remote_code)
    return _tokenizer_from(source.location, trust_remote_code)


def bnb_config(quant: QuantSettings, compute_dtype: torch.dtype, *, cpu_offload: bool = False) -> Any:
    """The transformers BitsAndBytesConfig for `quant` (None for modes that are not bitsandbytes).

    cpu_offload: keep modules that device_map="auto" puts on the CPU/disk unquantized in fp32 (bitsandbytes
    refuses to place quantized weights there, and transformers refuses the map without this flag).
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
    cache: bool = False,
    allow_cpu_repack: bool = False,
    offload_folder: Path | None = None,
    max_memory: dict[int | str, int | str] | None = None,
) -> LoadedModel:
    """Load model + tokenizer for `ref` (see the module docstring for the reference forms).

    quant: None = unquantized, except for a QLoRA run (run:NAME) which loads its base the way it was
    trained (4-bit). dtype overrides the policy dtype of the unquantized parts (resolve_dtype of
    quant.compute_dtype otherwise). device_map: default {"": 0} on CUDA, the CPU otherwise; "auto" spreads
    a model over the GPUs, CPU RAM and disk with accelerate (ignored on a CPU-only machine); what went where
    is in `LoadedModel.placement()`. offload_folder: where "auto" puts weights that fit neither GPU nor RAM (default
    `<runs>/_offload/`; it must lie inside the runs dir unless allow_local_paths). max_memory: accelerate's
    per-device budget for "auto", e.g. {0: "6GiB", "cpu": "12GiB"}. quant.mode "int8-dynamic" quantizes every
    Linear with torch for CPU inference (ConfigError on a GPU), merging an adapter first. adapter: a LoRA
    adapter (run:NAME, Hub id, or folder under the same path policy) applied on top, unmerged. cache=True goes through `MODEL_CACHE`.
    allow_cpu_repack: opt in to bitsandbytes' packed CPU inference layout for 4-bit models (1.2-5x faster
    CPU decoding, measured in engine/models/bnb_safety.py's docstring) for models that are never trained; the
    default keeps every 4-bit model safe to train (engine/models/bnb_safety.py).
    Raises ModelLoadError (or ConfigError for impossible dtype choices) with a message for the user.
    """
    if cache:
        return MODEL_CACHE.get_or_load(
            ref,
            quant,
            runs_dir=runs_dir,
            trust_remote_code=trust_remote_code,
            adapter=adapter,
            device=device,
            allow_local_paths=allow_local_paths,
            dtype=dtype,
            device_map=device_map,
            allow_cpu_repack=allow_cpu_repack,
            offload_folder=offload_folder,
            max_memory=max_memory,
        )
    return _load_uncached(
        ref,
        quant,
        runs_dir=runs_dir,
        trust_remote_code=trust_remote_code,
        adapter=adapter,
        device=device,
        allow_local_paths=allow_local_paths,
        dtype=dtype,
        device_map=device_map,
        allow_cpu_repack=allow_cpu_repack,
        offload_folder=offload_folder,
        max_memory=max_memory,
    )


def _load_uncached(
    ref: str,
    quant: QuantSettings | None,
    *,
    runs_dir: Path | None,
    trust_remote_code: bool,
    adapter: str | None,
    device: DeviceInfo | None,
    allow_local_paths: bool,
    dtype: torch.dtype | None,
    device_map: str | dict[str, Any] | None,
    allow_cpu_repack: bool = False,
    offload_folder: Path | None = None,
    max_memory: dict[int | str, int | str] | None = None,
) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    from . import compact as _compact  # noqa: F401  (registers compact_llm with the Auto classes)
    from .bnb_safety import disable_cpu_repack

    t0 = time.perf_counter()
    runs_dir = Path(runs_dir or default_runs_dir())
    device = device or detect_device()
    source = _resolve(ref, runs_dir, allow_local_paths)
    if quant is None:
        quant = source.run_quant or QuantSettings(mode="none")
    compute_dtype = resolve_dtype(quant.compute_dtype, device, field="quant.compute_dtype")
    model_dtype = dtype or compute_dtype
    int8_dynamic = quant.mode == "int8-dynamic"
    if int8_dynamic:
        from .cpu_quant import check_device

        check_device(device)  # before any weights are read: a GPU user gets the message at once
        if model_dtype != torch.float32:
            raise ConfigError("dtype", dtype_name(model_dtype), "fp32 with int8-dynamic (its kernels compute in fp32)")
    if device_map == "auto" and device.kind == "cpu":
        device_map = None  # everything lands on the CPU anyway; accelerate's hooks would only slow it down

    if quant.mode in ("8bit", "4bit"):
        _check_bnb()
    if quant.mode == "8bit" and device.kind == "cpu":
        _quiet_int8_cast_warning()
    kwargs: dict[str, Any] = {"dtype": model_dtype, "trust_remote_code": trust_remote_code}
    qconfig = bnb_config(quant, compute_dtype, cpu_offload=device_map == "auto")
    if qconfig is not None:
        kwargs["quantization_config"] = qconfig
    if device_map == "auto":
        kwargs["offload_folder"] = str(_offload_folder(offload_folder, runs_dir, allow_local_paths))
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
            raise ModelLoadError(
                f"Out of memory while loading {ref}: try 4-bit quantization, a smaller model, or free the "
                "models loaded in the playground."
            ) from exc
        raise _hub_error(exc, "model", source.location) from exc

    adapter_location = str(source.adapter_dir) if source.adapter_dir is not None else None
    if adapter:
        if adapter_location is not None:
            raise ModelLoadError(f"{ref} already carries a LoRA adapter; load its base model to apply another adapter.")
        adapter_location = _resolve_adapter(adapter, runs_dir, allow_local_paths)
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
    if source.adapter_dir is not None and _has_tokenizer(source.adapter_dir):
        tok_location = str(source.adapter_dir)
    tokenizer = _tokenizer_from(tok_location, trust_remote_code)
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


def _offload_folder(folder: Path | None, runs_dir: Path, allow_local_paths: bool) -> Path:
    """Where device_map="auto" writes weights that fit neither GPU nor RAM: under the runs dir by default (it is
    the one folder the app may write big files to, and on Colab it can live on Drive)."""
    path = Path(folder).expanduser() if folder is not None else runs_dir / "_offload"
    if not (allow_local_paths or is_within(path, runs_dir)):
        raise ModelLoadError(
            f"offload_folder {str(path)!r} is outside the runs directory {runs_dir}; weights can only be offloaded there."
        )
    return path


def _check_bnb() -> None:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as exc:  # requirements pin it; this is for hand-made environments
        raise ModelLoadError("8-bit and 4-bit loading need bitsandbytes: pip install bitsandbytes==0.50.2") from exc


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
        return PeftModel.from_pretrained(model, location, is_trainable=False)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "size mismatch" in str(exc):
            raise ModelLoadError(
                f"The LoRA adapter {location!r} was trained on a different base model (shapes do not match)."
            ) from exc
        raise _hub_error(exc, "LoRA adapter", location) from exc


# --------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------

CacheKey = tuple[Any, ...]


@dataclass
class CacheEntry:
    key: CacheKey
    loaded: LoadedModel
    last_used: float


class ModelCache:
    """Process-wide cache of loaded models, shared by all browser sessions and threads.

    Keeps at most `max_models` models (least recently used is unloaded first). The default of one is
    deliberate: a small GPU holds one model, and loading a second before freeing the first is the classic
    playground OOM. Loads run under the lock, so two sessions asking for the same model load it once and
    two different loads never compete for memory (the eviction happens before the load, so a failed load
    leaves the cache empty rather than over-full). Unloading drops the cache's reference; the memory is
    freed once no generation still holds the model.
    """

    def __init__(self, max_models: int = 1, loader: Callable[..., LoadedModel] | None = None) -> None:
        if max_models < 1:
            raise ValueError("max_models must be >= 1")
        self.max_models = max_models
        self._loader = loader or _load_uncached
        self._lock = threading.RLock()
        self._entries: OrderedDict[CacheKey, CacheEntry] = OrderedDict()

    @staticmethod
    def key(
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
    ) -> CacheKey:
        """The identity of a load request. allow_local_paths is part of it so that a model loaded by a
        trusted caller is never handed to one that may not name that path."""
        q = None if quant is None else (quant.mode, quant.quant_type, quant.double_quant, quant.compute_dtype)
        dm = json.dumps(device_map, sort_keys=True) if isinstance(device_map, dict) else device_map
        return (
            ref.strip(),
            q,
            str(Path(runs_dir).resolve()) if runs_dir else None,
            trust_remote_code,
            adapter,
            device.kind if device else None,
            allow_local_paths,
            str(dtype) if dtype else None,
            dm,
            allow_cpu_repack,
            str(offload_folder) if offload_folder else None,
            json.dumps({str(k): v for k, v in max_memory.items()}, sort_keys=True) if max_memory else None,
        )

    def get_or_load(self, ref: str, quant: QuantSettings | None = None, **kwargs: Any) -> LoadedModel:
        """The cached model for this request, loading it (and evicting the least recently used) if needed."""
        key = self.key(ref, quant, **kwargs)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.last_used = time.time()
                self._entries.move_to_end(key)
                return entry.loaded
            while len(self._entries) >= self.max_models:
                oldest = next(iter(self._entries))
                self._drop(oldest)
            _free_memory()
            loaded = self._loader(ref, quant, **_loader_kwargs(kwargs))
            self._entries[key] = CacheEntry(key, loaded, time.time())
            return loaded

    def get(self, key: CacheKey) -> LoadedModel | None:
        with self._lock:
            entry = self._entries.get(key)
            return entry.loaded if entry else None

    def unload(self, key_or_ref: CacheKey | str) -> int:
        """Unload one entry (by key) or every entry loaded from a reference (by ref string); returns how many."""
        with self._lock:
            if isinstance(key_or_ref, str):
                keys = [k for k in self._entries if k[0] == key_or_ref.strip()]
            else:
                keys = [key_or_ref] if key_or_ref in self._entries else []
            for k in keys:
                self._drop(k)
            if keys:
                _free_memory()
            return len(keys)

    def unload_all(self) -> int:
        with self._lock:
            n = len(self._entries)
            for k in list(self._entries):
                self._drop(k)
            _free_memory()
            return n

    def loaded(self) -> list[dict[str, Any]]:
        """What is loaded now, most recently used last: ref, where, footprint, quantization, last use."""
        with self._lock:
            return [
                {
                    "key": e.key,
                    "ref": e.loaded.ref,
                    "where": e.loaded.where,
                    "footprint_gib": round(e.loaded.footprint_gib, 3),
                    "quant": e.loaded.quant.mode,
                    "last_used": e.last_used,
                }
                for e in self._entries.values()
            ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _drop(self, key: CacheKey) -> None:
        entry = self._entries.pop(key)
        log.info("unloading %s", entry.loaded.ref)
        entry.loaded = None  # type: ignore[assignment]  # drop our reference before collecting


def _loader_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    defaults = {
        "runs_dir": None,
        "trust_remote_code": False,
        "adapter": None,
        "device": None,
        "allow_local_paths": False,
        "dtype": None,
        "device_map": None,
        "allow_cpu_repack": False,
        "offload_folder": None,
        "max_memory": None,
    }
    unknown = set(kwargs) - set(defaults)
    if unknown:
        raise TypeError(f"unexpected arguments: {sorted(unknown)}")
    return {**defaults, **kwargs}


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# The one shared cache of the process (design.md §7: process-wide objects are explicit and locked).
MODEL_CACHE = ModelCache()
