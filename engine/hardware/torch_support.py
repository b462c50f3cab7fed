"""The oldest torch the engine runs on, and the one message a runtime with an older torch gets.

Colab, Kaggle and the GPU machine lent to this project's work each bring their own torch (Colab's is not
requirements.txt's 2.13.0, and the notebook keeps it: engine/notebook.py). The engine works with any torch from
`MIN_TORCH` on; below it, something breaks in a way that names neither version, so `check_torch` (called when
engine/hardware/device.py is imported, i.e. before any model, run or estimate) says so in one line instead.

What needs which torch (the newest line decides `MIN_TORCH`; checked against the libraries' sources, 2026-11):

| torch | what needs it | what happens below it |
|-------|---------------|-----------------------|
| 2.6   | transformers 5.23 (`is_torch_available`) | transformers disables torch with a log line: every model load fails with "requires PyTorch" |
| 2.5   | `torch.OutOfMemoryError` (engine/cli.py, inference/batch.py, inference/generate.py) | AttributeError when a run or a generation runs out of memory |
| 2.4   | `torch.get_autocast_dtype(device)` (training/autocast_4bit.py, hardware/cpu_bf16.py) | QLoRA under CPU bf16 autocast fails at its first step |
| 2.3   | `torch.amp.GradScaler("cpu")` (training/cpu_fp16.py) | the CPU fp16 stand-in for a T4 cannot build its scaler |

Newer torch features are not used; nothing else in the engine branches on the torch version (a test trains a step with
`torch.__version__` set to `MIN_TORCH`). bitsandbytes 0.50 asks for torch >= 2.4 < 3 and accelerate 1.15 for >= 2.0, both
below the floor. Standard library only at import: engine/notebook.py reads `MIN_TORCH` before anything is installed.
"""

from __future__ import annotations

import re

MIN_TORCH = (2, 6)
# (oldest torch, what needs it: a phrase key under torch_runtime.needs in presets/lang), newest first: the first line a
# version fails is the one the message names
NEEDS: tuple[tuple[tuple[int, int], str], ...] = (
    ((2, 6), "transformers"),  # transformers 5.23 turns torch off below 2.6
    ((2, 5), "oom_error"),  # torch.OutOfMemoryError
    ((2, 4), "autocast_dtype"),  # torch.get_autocast_dtype(device)
    ((2, 3), "cpu_scaler"),  # torch.amp.GradScaler("cpu")
)


def version_tuple(version: str) -> tuple[int, ...]:
    """(2, 11, 0) for "2.11.0+cu130", (2, 6) for "2.6"; local build tags and pre-release suffixes are ignored."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def missing_feature(version: str) -> tuple[str, str] | None:
    """(the oldest torch needed, the key of what needs it) for the newest need that `version` misses; None when it has
    them all."""
    found = version_tuple(version)[:2]
    for needed, what in NEEDS:
        if found < needed:
            return ".".join(map(str, needed)), what
    return None


def check_torch(version: str) -> None:
    """Raise EngineError (key `torch_runtime.too_old`, naming the runtime's torch and the one needed) when `version`
    is older than the engine needs; nothing otherwise."""
    missing = missing_feature(version)
    if missing is None:
        return
    from ..errors import EngineError, Phrase  # lazily: this module stays standard-library only for the notebook

    needed, what = missing
    raise EngineError(key="torch_runtime.too_old", found=version, needed=".".join(map(str, MIN_TORCH)),
                      feature=Phrase(f"torch_runtime.needs.{what}", version=needed))
