"""What the GPU kit's sections share: the section's context (its JSON written as each part ends, the time left), and
the models they measure (random weights of a catalog shape, or a tiny Llama for the CPU dry run).

Only the GPU machine's image plus the kit may be imported here (torch 2.11 there): the engine, transformers, peft,
bitsandbytes, datasets, trl, PyYAML.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Context:
    """One section's run: where its JSON goes, until when it may run, and whether this is the CPU dry run."""

    name: str
    out: Path
    deadline: float  # time.time() after which the orchestrator kills the section
    dry_run: bool
    work: Path  # models and runs (several GB on the GPU machine; never under --out)
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.out / f"{self.name}.json"

    def left(self) -> float:
        return self.deadline - time.time()

    def record(self, key: str, value: Any) -> None:
        """Store one part's result and write the section's JSON at once (a timeout keeps what finished)."""
        self.result[key] = value
        self.write()

    def write(self) -> None:
        write_json(self.path, self.result)

    @contextmanager
    def part(self, key: str, *, min_left_s: float = 0.0):
        """A part of the section: its seconds and any error recorded under `key`; an error does not stop the section.
        Skipped (recorded with the reason) when less than `min_left_s` seconds are left."""
        if self.left() < min_left_s:
            self.record(key, {"status": "skipped", "reason": f"{self.left():.0f} s left, the part needs about {min_left_s:.0f} s"})
            yield None
            return
        t0 = time.time()
        holder: dict[str, Any] = {}
        try:
            yield holder
            self.record(key, {"status": "ok", "seconds": round(time.time() - t0, 1), **holder})
        except Exception as exc:  # a part's failure is a result; the next part still runs
            self.record(key, {"status": "failed", "seconds": round(time.time() - t0, 1), "error": f"{type(exc).__name__}: {exc}"[:2000],
                              "traceback": traceback.format_exc()[-3000:], **holder})


def write_json(path: Path, data: Any) -> None:
    """Atomic: a reader (or a kill) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def engine_env(runs: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for an engine subprocess: the repository importable, offline, unbuffered."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p)
    if runs is not None:
        env["COMPACT_LAB_RUNS"] = str(runs)
    env.update(extra)
    return env


TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=1024, tie_word_embeddings=True)


def build_model(shape: str, folder: Path, *, device: str = "cuda") -> Path:
    """A random-weight causal LM in `folder` (reused when there): `shape` a catalog entry of presets/models.yaml (the
    real 1B/3B architecture, 128,256-row embedding included, as bench/cuda_qlora.py builds it), or "tiny" (a 2-layer
    Llama for the CPU dry run). Saved in fp16 with a byte-level tokenizer trained on the built-in corpus."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

    from engine.config import TrainConfig
    from engine.data.build import train_records
    from engine.data.formats import record_texts
    from engine.models.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(record_texts(train_records(TrainConfig(dataset="builtin:corpus"))), vocab_size=512 if shape == "tiny" else 4096)
    if shape == "tiny":
        config = LlamaConfig(vocab_size=len(tokenizer), **TINY)
    else:
        from engine.estimator.catalog import catalog_lookup

        entry = catalog_lookup(shape)
        if entry is None:
            raise SystemExit(f"{shape} is not in presets/models.yaml")
        data = dict(entry.config)
        config = AutoConfig.for_model(data.pop("model_type"), **data)
    config.pad_token_id, config.eos_token_id, config.bos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float16 if device == "cuda" else torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return folder


def cuda_ready() -> bool:
    import torch

    return torch.cuda.is_available()
