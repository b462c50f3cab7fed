"""What a training run checks before it writes anything: refusals before side effects.

A run refused for its settings (a precision this device or model family cannot train in, a quantization compute
dtype likewise, FSDP without GPUs) must leave no run folder behind, whether it was started from the command line
(`python -m engine train`, engine/cli.py) or from the page (engine/training/jobs.py `JobManager.start`), so both
call `check_before_start` before they create the folder; the run itself (engine/training/run.py) resolves its
precision with the same function, so the three cannot disagree. Only checks that need no weights belong here: the
others (LoRA targets, the eval set for early stopping) are known once the model is loaded, and end the run as failed
with its message.

`check_data_before_start` is the data check's refusals ("Check the data", engine/training/data_check.py: rows that
cannot be read, columns that match no format, a method without the data it needs), which the page, the MCP tool
(both through `JobManager.start`) and `python -m engine train` run before the run folder exists, so that data bound
to fail never starts a run. The run itself reads the data once, later, and does not repeat it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import TrainConfig
from ..hardware.device import DeviceInfo, detect_device, resolve_dtype


@dataclass(frozen=True)
class RunPrecision:
    """The device a run trains on, the dtype it computes in, and the base model's family (`model_type`) behind it."""

    device: DeviceInfo
    dtype: torch.dtype
    model_type: str | None


def training_model_type(cfg: TrainConfig, runs_dir: Path, device: DeviceInfo) -> str | None:
    """The base model's config.json model_type, for the dtype policy's family rule (fp32, not fp16, for families that
    overflow in fp16 on a GPU without bf16, or a CPU standing in for one); None on a CPU, where no rule changes
    anything, and for scratch runs."""
    if not device.gpu_policy or cfg.method == "scratch":
        return None
    from ..models.references import model_type_of

    return model_type_of(cfg.base_model, runs_dir)


def training_precision(cfg: TrainConfig, runs_dir: Path, device: DeviceInfo | None = None) -> RunPrecision:
    """The run's device and compute dtype (engine/hardware/device.py policy); ConfigError naming `precision` when
    the choice is refused here."""
    device = device or detect_device()
    model_type = training_model_type(cfg, runs_dir, device)
    return RunPrecision(device, resolve_dtype(cfg.precision, device, field="precision", model_type=model_type), model_type)


def check_before_start(cfg: TrainConfig, runs_dir: Path, device: DeviceInfo | None = None) -> RunPrecision:
    """Every refusal a run of `cfg` would meet before loading weights or data, raised now: the distributed mode
    (FSDP needs GPUs), the training precision and, for a QLoRA run, the 4-bit layers' compute dtype (ConfigError
    naming the field)."""
    from ..hardware.distributed import check_mode

    device = device or detect_device()
    check_mode(cfg.distributed, device.kind)
    precision = training_precision(cfg, runs_dir, device)
    if cfg.method == "qlora":
        resolve_dtype(cfg.quant.compute_dtype, precision.device, field="quant.compute_dtype", model_type=precision.model_type)
    return precision


def check_data_before_start(cfg: TrainConfig) -> None:
    """The data check's refusals (keyed DataError, in the visitor's language where rendered) before a run folder exists:
    local files and built-in samples are read as the run reads them; a hub:owner/name dataset is left to the run (Start
    does not download it)."""
    from .data_check import check_data

    check_data(cfg, hub=False)
