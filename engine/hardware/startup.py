"""The app's first words about its hardware: which device it will use, and a loud warning when a GPU is there but torch
cannot use it (a torch built for a newer CUDA than the driver runs, or a CPU-only torch), since everything then runs
on the CPU, many times slower, with nothing else saying so. Printed by app.py at start (in the console's language), so
a notebook cell shows it before the link."""

from __future__ import annotations

from collections.abc import Callable

from .. import i18n
from .device import DeviceInfo, detect_device
from .nvidia import Gpu, describe, find_gpus


def device_lines(device: DeviceInfo | None = None, gpus: list[Gpu] | None = None, *, lang: str | None = None,
                 torch_build: Callable[[], tuple[str, str | None]] | None = None) -> list[str]:
    """The start-up lines: the device in use, then the warning when nvidia-smi sees a GPU that torch does not."""
    lang = lang or i18n.cli_lang()
    device = device or detect_device()
    gpus = find_gpus() if gpus is None else gpus
    if device.kind == "cuda":
        return [i18n.t("space.device.gpu", lang, name=device.name, gib=f"{device.total_gib:.1f}")]
    lines = [i18n.t("space.device.cpu", lang, name=device.name, gib=f"{device.total_gib:.0f}")]
    if gpus:
        version, cuda = (torch_build or _torch_build)()
        lines.append(i18n.t("space.device.gpu_unused", lang, gpu=describe(gpus[0]), torch=f"{version}, CUDA {cuda}" if cuda else version))
    return lines


def _torch_build() -> tuple[str, str | None]:
    import torch

    return torch.__version__, torch.version.cuda
