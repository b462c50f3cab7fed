"""Hardware detection and the dtype policy of the whole engine.

One place decides which dtype a job computes in, so that the loader, the trainer and the estimator agree:

| device                      | auto  | fp16                  | bf16                         | fp32 |
|-----------------------------|-------|-----------------------|------------------------------|------|
| CUDA, compute capability>=8 | bf16  | ok                    | ok                           | ok   |
| CUDA, older (T4 = 7.5)      | fp16  | ok                    | ConfigError (no bf16 units)  | ok   |
| CPU with fast bf16 (AMX...) | bf16  | ConfigError (slow)    | ok                           | ok   |
| other CPU                   | fp32  | ConfigError (slow)    | ok if torch supports it      | ok   |

Model families that overflow in fp16 (Gemma, Gemma-2/3, T5, ... — `presets/precision.yaml`, each with its source)
change the older-GPU row when the caller passes the model's `model_type`: `auto` computes in fp32 there (policy
`fp32`) and an explicit `fp16` is refused with advice; policy `refuse` refuses `auto` too. On bf16 devices and on
CPU nothing changes (neither picks fp16 by itself).

Developer switch `COMPACT_LAB_CPU_FP16_AMP=1` (tests and CI, never the form): the CPU stands in for a T4 — the
policy takes the older-GPU row (auto = fp16, family rules included, bf16 refused) and training runs the real fp16
mixed-precision path, fp16 autocast on the CPU with a `GradScaler("cpu")` (engine/training/cpu_fp16.py). It is
slow (CPU fp16 kernels are few) and exists so that loss scaling, skipped steps and the scaler in checkpoints are
exercised without a GPU. The form, the estimator, the loader and the training run all
resolve through `resolve_dtype(..., model_type=...)`, so they agree.

Developer switch `COMPACT_LAB_EMULATE_T4=1` (tests and the GPU kit, never the form): on a CUDA card, detection reports
a T4 (compute capability 7.5, no bf16, 15 GiB) and caps the process at a T4's usable memory, so the T4 decisions run
on real CUDA (engine/hardware/t4.py). It does nothing without CUDA.

Why fp16 is refused on CPU: most CPU kernels have no fp16 path (they upcast per op or are missing), so an
fp16 model on CPU is slower than fp32 and fp16 training without a GPU grad scaler diverges easily. bf16 on
CPU is allowed because torch has real bf16 CPU kernels (AVX512-BF16/AMX make it fast; elsewhere it is
emulated but correct); `auto` picks it where a matmul micro-benchmark says it is clearly faster than fp32
(engine/hardware/cpu_bf16.py). Training on CPU in bf16 is autocast with fp32 master weights (the Trainer's CPU
AMP), so it learns like fp32; inference computes in bf16.

Peak-memory helpers report CUDA `max_memory_allocated` on a GPU and the process's peak resident set size
on CPU (which includes Python, torch and everything else in the process, and cannot be reset: on CPU
`reset_peak` is a no-op and the number is a high-water mark for the process's lifetime).
"""

from __future__ import annotations

import functools
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import yaml

from ..errors import ConfigError, Phrase
from ..i18n import t
from .t4 import ENV_EMULATE_T4, T4, cap_process_memory, emulating_t4
from .torch_support import check_torch

check_torch(torch.__version__)  # one plain message when the runtime's torch is older than the engine needs

DeviceKind = Literal["cuda", "cpu"]
ENV_CPU_FP16_AMP = "COMPACT_LAB_CPU_FP16_AMP"  # developer switch: the CPU stands in for a GPU without bf16 (module doc)

_DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
PRECISION_FILE = Path(__file__).resolve().parents[2] / "presets" / "precision.yaml"


@dataclass(frozen=True)
class Fp16Rule:
    """One family of presets/precision.yaml: what happens to fp16 for its model types."""

    name: str
    model_types: tuple[str, ...]
    policy: Literal["fp32", "refuse"]
    why: str
    source: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def fp16_rules() -> tuple[Fp16Rule, ...]:
    """The fp16-unsafe families of presets/precision.yaml (read once)."""
    data = yaml.safe_load(PRECISION_FILE.read_text(encoding="utf-8")) or {}
    rules = []
    for entry in data.get("families", []):
        if entry.get("policy") not in ("fp32", "refuse") or not entry.get("source"):
            raise ConfigError("presets/precision.yaml", entry.get("name"), "an entry with policy fp32 or refuse and a source")
        rules.append(Fp16Rule(entry["name"], tuple(entry["model_types"]), entry["policy"], " ".join(str(entry["why"]).split()),
                              tuple(entry["source"])))
    return tuple(rules)


def fp16_rule(model_type: str | None) -> Fp16Rule | None:
    """The rule for a config.json `model_type` when its family is unsafe in fp16, else None."""
    if not model_type:
        return None
    return next((r for r in fp16_rules() if model_type in r.model_types), None)


@dataclass(frozen=True)
class DeviceInfo:
    """What the engine needs to know about the device a model runs on."""

    kind: DeviceKind
    name: str
    total_gib: float
    bf16: bool  # native bf16 support (Ampere+ on CUDA; torch bf16 kernels on CPU)
    capability: tuple[int, int] | None = None  # CUDA compute capability, None on CPU
    bf16_fast: bool = False  # bf16 is faster than fp32 here, so `auto` picks it (Ampere+; a CPU with AMX/AVX512-BF16)
    fp16_amp_standin: bool = False  # a CPU standing in for a T4 (COMPACT_LAB_CPU_FP16_AMP=1): fp16 mixed precision

    @property
    def gpu_policy(self) -> bool:
        """Whether the GPU rows of the dtype policy apply: a CUDA GPU, or a CPU standing in for a T4."""
        return self.kind == "cuda" or self.fp16_amp_standin

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cuda:0" if self.kind == "cuda" else "cpu")


def _cpu_total_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


def ram_gib() -> float:
    """This machine's physical RAM in GiB (0 when the OS does not say)."""
    return _cpu_total_gib()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "CPU"


def detect_device() -> DeviceInfo:
    """The device new models go to: the first CUDA GPU if there is one, otherwise the CPU."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        if emulating_t4():  # the developer switch (module doc, engine/hardware/t4.py): a T4 on this card
            cap_process_memory(0)
            return DeviceInfo(kind="cuda", name=f"{T4.name} (emulated on {props.name}: {ENV_EMULATE_T4}=1)", total_gib=T4.total_gib,
                              bf16=False, capability=T4.capability, bf16_fast=False)
        cap = (props.major, props.minor)
        return DeviceInfo(
            kind="cuda",
            name=props.name,
            total_gib=props.total_memory / 2**30,
            # is_bf16_supported() also says True on pre-Ampere cards where bf16 is emulated (slow); the
            # policy wants real bf16 units, i.e. compute capability >= 8.
            bf16=cap[0] >= 8,
            capability=cap,
            bf16_fast=cap[0] >= 8,
        )
    from .cpu_bf16 import bf16_is_fast

    if os.environ.get(ENV_CPU_FP16_AMP, "") == "1":  # the developer switch (module doc): a CPU with a T4's policy
        return DeviceInfo(kind="cpu", name=f"{_cpu_name()} (standing in for a GPU without bf16: {ENV_CPU_FP16_AMP}=1)",
                          total_gib=_cpu_total_gib(), bf16=False, capability=None, bf16_fast=False, fp16_amp_standin=True)
    name, bf16 = _cpu_name(), _cpu_bf16_ok()
    return DeviceInfo(kind="cpu", name=name, total_gib=_cpu_total_gib(), bf16=bf16, capability=None, bf16_fast=bf16 and bf16_is_fast(name))


def _cpu_bf16_ok() -> bool:
    """Whether a bf16 matmul runs on this CPU build of torch (it does on every x86/ARM build we pin)."""
    try:
        a = torch.ones(2, 2, dtype=torch.bfloat16)
        return bool((a @ a).float().sum().item() == 8.0)
    except RuntimeError:
        return False


def resolve_dtype(choice: str, device: DeviceInfo | None = None, *, field: str = "compute_dtype",
                  model_type: str | None = None) -> torch.dtype:
    """The torch dtype for a dtype choice ("auto", "fp16", "bf16", "fp32") on `device` (see module table), for a
    model whose config.json says `model_type` (None: unknown, no family rule applies).

    Raises ConfigError, naming `field`, for combinations that would silently be slow or wrong.
    """
    device = device or detect_device()
    rule = fp16_rule(model_type)
    if choice == "auto":
        if device.gpu_policy:
            if device.bf16:
                return torch.bfloat16
            if rule is None:
                return torch.float16
            if rule.policy == "refuse":
                raise _fp16_refusal(field, choice, rule, model_type, device, allow_fp32=False)
            return torch.float32  # fp16 would overflow for this family and there is no bf16: fp32 compute
        return torch.bfloat16 if device.bf16_fast else torch.float32
    if choice not in _DTYPES:
        raise ConfigError(field, choice, allowed_key="message.allowed.choices", choices=["auto", *_DTYPES])
    if choice == "bf16" and not device.bf16:
        if device.fp16_amp_standin:
            raise ConfigError(field, choice, f"fp16, fp32 or auto: {ENV_CPU_FP16_AMP}=1 makes this CPU stand in for a GPU without bf16")
        if device.kind == "cuda":
            cap = ".".join(map(str, device.capability or ()))
            raise ConfigError(field, choice, allowed_key="error.allowed.no_bf16_gpu_family" if rule else "error.allowed.no_bf16_gpu",
                              gpu=device.name, cap=cap)
        raise ConfigError(field, choice, allowed_key="error.allowed.no_bf16_cpu")
    if choice == "fp16" and rule is not None and device.gpu_policy:
        raise _fp16_refusal(field, choice, rule, model_type, device, allow_fp32=rule.policy == "fp32")
    if choice == "fp16" and device.kind == "cpu" and not device.fp16_amp_standin:
        raise ConfigError(field, choice, allowed_key="error.allowed.fp16_cpu")
    return _DTYPES[choice]


def precision_reason(device: DeviceInfo | None = None, model_type: str | None = None, lang: str = "en") -> str:
    """One line saying what `auto` computes in on `device` (for a model whose config.json says `model_type`) and
    why, in `lang`, for the fine-tune form and the logs; it follows `resolve_dtype`."""
    device = device or detect_device()
    if device.fp16_amp_standin:
        rule = fp16_rule(model_type)
        if rule is not None:
            return f"auto picks fp32: {rule.name} overflows in fp16 and {device.name} has no bf16"
        return f"auto picks fp16 mixed precision: {device.name}"
    if device.kind == "cuda":
        cap = ".".join(map(str, device.capability or ()))
        if device.bf16:
            return t("text.precision.cuda_bf16", lang, gpu=device.name, cap=cap)
        rule = fp16_rule(model_type)
        if rule is not None:
            return t("text.precision.cuda_fp32", lang, gpu=device.name, cap=cap, family=rule.name)
        return t("text.precision.cuda_fp16", lang, gpu=device.name, cap=cap)
    from .cpu_bf16 import bf16_reason

    return bf16_reason(device.name, lang)


def master_dtype(method: str, dtype: torch.dtype, device: DeviceInfo) -> torch.dtype:
    """The dtype a model is loaded in to be trained with `method` in compute `dtype` on `device`.

    Mixed precision keeps fp32 master weights where weights are trained: fp16 AMP on a GPU (a grad scaler on
    fp16 weights loses small updates) and bf16 autocast on a CPU (the Trainer's CPU AMP). Frozen or quantized
    bases (LoRA, QLoRA) and bf16 on CUDA load in the compute dtype.
    """
    trains_weights = method in ("full", "distill", "scratch")
    if trains_weights and (dtype == torch.float16 or (dtype == torch.bfloat16 and device.kind == "cpu")):
        return torch.float32
    return dtype


def _fp16_refusal(field: str, choice: str, rule: Fp16Rule, model_type: str | None, device: DeviceInfo, *, allow_fp32: bool) -> ConfigError:
    """fp16 refused for an fp16-unsafe family: what to choose instead, and why, in the reader's language (the family's
    reason itself is quoted from presets/precision.yaml, with its source)."""
    if allow_fp32:
        options = "bf16_or_fp32" if device.bf16 else "fp32_or_auto"
    else:
        options = "bf16" if device.bf16 else "bf16_gpu"
    return ConfigError(field, choice, allowed_key="visitor_error.fp16_family", options=Phrase(f"visitor_error.fp16_options.{options}"),
                       family=rule.name, model_type=model_type or "?", why=rule.why, source=rule.source[0])


def dtype_name(dtype: torch.dtype) -> str:
    """Short name ("fp16", "bf16", "fp32") of a torch dtype, for logs and the UI."""
    for name, dt in _DTYPES.items():
        if dt == dtype:
            return name
    return str(dtype).replace("torch.", "")


def peak_memory_gib(device: DeviceInfo | None = None) -> float | None:
    """Peak memory since the last `reset_peak`: CUDA allocated bytes, or the process's peak RSS on CPU."""
    device = device or detect_device()
    if device.kind == "cuda":
        if not torch.cuda.is_available():
            return None
        return torch.cuda.max_memory_allocated(0) / 2**30
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    # ru_maxrss is in kilobytes on Linux and in bytes on macOS.
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20


def peak_reserved_gib(device: DeviceInfo | None = None) -> float | None:
    """CUDA only: the peak memory torch's caching allocator reserved since the last `reset_peak` (allocated plus its
    fragmentation: what the estimator's "reserved" figure predicts); None on a CPU."""
    device = device or detect_device()
    if device.kind != "cuda" or not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_reserved(0) / 2**30, 3)


def reset_peak(device: DeviceInfo | None = None) -> None:
    """Start a new peak-memory window (CUDA only; the CPU peak RSS cannot be reset)."""
    device = device or detect_device()
    if device.kind == "cuda" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats(0)
