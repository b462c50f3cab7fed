"""Compact LLM Lab engine: memory estimation, model loading, data, training, jobs, generation, export.

The public API is re-exported here lazily (PEP 562) so that `import engine` stays fast and light: the
CLI's `--help` and the estimator do not pay for importing torch/transformers until they need them.
This package never imports gradio (tests/test_no_gradio.py enforces it).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from .errors import ConfigError, DataError, EngineError, GenerationError, HubError, JobError, ModelLoadError

# bitsandbytes 0.50 logs a warning on CPU when the optional `kernels` package (which downloads from the Hub)
# is missing; it then uses its own CPU kernels. Harmless, and alarming in a log a beginner reads: hide it.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

# name -> submodule that defines it
_LAZY = {
    "TrainConfig": "config",
    "QuantSettings": "config",
    "LoraSettings": "config",
    "GenerationSettings": "config",
    "MemoryQuery": "config",
    "CompactConfig": "models.compact",
    "CompactForCausalLM": "models.compact",
    "estimate": "estimator.memory",
    "load_model": "models.loading",
    "stream_generate": "inference.generate",
    "run_training": "training.run",
    "distillation_loss": "training.distill",
    "JobManager": "training.jobs",
    "merge_adapter": "export.merge",
    "push_run": "export.hub",
    "apply_recipe": "estimator.recipes",
}

__all__ = [
    "ConfigError",
    "DataError",
    "EngineError",
    "GenerationError",
    "HubError",
    "JobError",
    "ModelLoadError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
