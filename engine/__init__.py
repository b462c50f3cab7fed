"""Compact LLM Lab engine: memory estimation, model loading, data, training, jobs, generation, export.

What a user of the library imports (from `engine`, or from the module named):

=====================  ==========================  =============================================================
name                   module                      what it is
=====================  ==========================  =============================================================
TrainConfig            engine.config               a training job: model, method, data, training, LoRA, run
QuantSettings          engine.config               how a model's weights are loaded (none, 8-bit, 4-bit, CPU int8)
LoraSettings           engine.config               LoRA rank, alpha, dropout and targets
GenerationSettings     engine.config               decoding: greedy or sampling, penalties, stop strings, seed
MemoryQuery            engine.config               a memory-estimator question: model, task, batch, length, ...
resolve_dtype          engine.hardware.device      the dtype policy: device x choice x model family (fp16-unsafe)
GgufSettings           engine.config               a GGUF export: weight type (f16, q8_0, q4_0) and decoding preset
estimate               engine.estimator.memory     MemoryQuery -> MemoryEstimate (breakdown, verdicts, fixes)
apply_recipe           engine.estimator.recipes    a hardware tier's recipe adapted to a model
load_model             engine.models.loading       any model reference -> LoadedModel (model, tokenizer, device)
load_tokenizer         engine.models.loading       the tokenizer of a model reference
MODEL_CACHE            engine.models.cache         the process-wide cache of loaded models (shared, locked)
CompactConfig          engine.models.compact       the compact GPT's config (a transformers PretrainedConfig)
CompactForCausalLM     engine.models.compact       the compact GPT (a transformers PreTrainedModel)
build_train_data       engine.data.build           TrainConfig + tokenizer -> train/eval examples and report
inspect_dataset        engine.training.data_check  the data check: first rows as the model sees them, dropped rows
run_training           engine.training.run         train according to a TrainConfig into a run folder
JobManager             engine.training.jobs        training runs as subprocesses: start, stop, resume, status
distillation_loss      engine.training.distill     the knowledge-distillation loss
stream_generate        engine.inference.generate   stream tokens from a LoadedModel
merge_adapter          engine.export.merge         merge a run's LoRA adapter into a 16-bit copy of its base
merge_plan             engine.export.merge         where a merge runs: the GPU when the unquantized base fits, else CPU
export_gguf            engine.export.gguf          a model folder -> GGUF (tokenizer, chat template) + Ollama Modelfile
export_ref_gguf        engine.export.gguf_run      a run (merged first if LoRA) or builtin:NAME -> GGUF in the exports folder
push_run               engine.export.hub           push a run to the Hugging Face Hub with a model card
=====================  ==========================  =============================================================

The packages and how data flows through them: docs/architecture.md. The names above are re-exported here lazily
(PEP 562) so that `import engine` stays fast and light: the CLI's `--help` and the estimator do not pay for
importing torch/transformers until they need them. This package never imports gradio (tests/test_no_gradio.py).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from .errors import ConfigError, DataError, EngineError, GenerationError, HubError, JobError, ModelLoadError, TrainingDiverged

# bitsandbytes 0.50 logs a warning on CPU when the optional `kernels` package (which downloads from the Hub)
# is missing; it then uses its own CPU kernels. Harmless, and alarming in a log a beginner reads: hide it.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

# name -> module that defines it (the table above; tests/test_layout.py keeps the two equal)
_LAZY = {
    "TrainConfig": "config",
    "QuantSettings": "config",
    "LoraSettings": "config",
    "GenerationSettings": "config",
    "MemoryQuery": "config",
    "resolve_dtype": "hardware.device",
    "GgufSettings": "config",
    "estimate": "estimator.memory",
    "apply_recipe": "estimator.recipes",
    "load_model": "models.loading",
    "load_tokenizer": "models.loading",
    "MODEL_CACHE": "models.cache",
    "CompactConfig": "models.compact",
    "CompactForCausalLM": "models.compact",
    "build_train_data": "data.build",
    "inspect_dataset": "training.data_check",
    "run_training": "training.run",
    "JobManager": "training.jobs",
    "distillation_loss": "training.distill",
    "stream_generate": "inference.generate",
    "merge_adapter": "export.merge",
    "merge_plan": "export.merge",
    "export_gguf": "export.gguf",
    "export_ref_gguf": "export.gguf_run",
    "push_run": "export.hub",
}

__all__ = [
    "ConfigError",
    "DataError",
    "EngineError",
    "GenerationError",
    "HubError",
    "JobError",
    "ModelLoadError",
    "TrainingDiverged",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
