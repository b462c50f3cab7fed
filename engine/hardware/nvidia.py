"""NVIDIA GPUs as `nvidia-smi` sees them, without torch: name, memory, driver and the CUDA version the driver supports.

torch may be missing, or built for a CUDA the driver cannot run (then `torch.cuda.is_available()` is False although
there is a GPU): nvidia-smi still tells. Used by the notebook's runtime check (engine/notebook.py, before anything is
installed) and by the app's start-up line (engine/hardware/startup.py). Standard library only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    """One GPU: its name, memory in MiB, the driver version, and the highest CUDA version that driver runs."""

    name: str
    memory_mib: int
    driver: str
    cuda: str  # the highest CUDA version the driver supports ("12.4"), "" when nvidia-smi does not say


def parse_nvidia_smi(query_csv: str, banner: str) -> list[Gpu]:
    """The GPUs in `nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits` output, with
    the CUDA version from the plain `nvidia-smi` banner ("CUDA Version: 12.4")."""
    cuda = m.group(1) if (m := re.search(r"CUDA Version:\s*([\d.]+)", banner)) else ""
    gpus = []
    for line in query_csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            try:
                memory = int(float(parts[1]))
            except ValueError:
                memory = 0
            gpus.append(Gpu(parts[0], memory, parts[2], cuda))
    return gpus


def find_gpus() -> list[Gpu]:
    """The NVIDIA GPUs of this runtime (nvidia-smi), [] when there is none or nvidia-smi fails."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        query = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=30, check=True).stdout
        banner = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(query, banner)


def describe(gpu: Gpu) -> str:
    """"Tesla T4, 15.0 GiB, driver 550.54.15, CUDA 12.4"."""
    return f"{gpu.name}, {gpu.memory_mib / 1024:.1f} GiB, driver {gpu.driver}" + (f", CUDA {gpu.cuda}" if gpu.cuda else "")
