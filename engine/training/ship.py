"""The built-in model shipped in the repository: made by `python -m engine prepare-builtin NAME --ship`, checked by its
recorded eval loss.

Shipping compact-mini pretrained makes the first fine-tune start at once instead of pretraining for minutes first.
`ship_builtin` pretrains the preset afresh with its own recipe (engine/training/builtin.py `builtin_pretrain_config`,
into <runs>/_builtin/NAME as `--rebuild` does), stores the weights in 16 bits (half the size; the eval loss is
measured in every precision and recorded, so the choice can be checked) with the tokenizer in
presets/models/NAME, and writes `recorded.json`: how it was made and the eval loss that `builtin_eval_loss`
gives on the recipe's own eval split. tests/training/test_shipped_builtin.py loads the shipped copy and checks it
still reaches that loss. Nothing at runtime writes into presets/: only this command does.
"""

from __future__ import annotations

import datetime
import json
import platform
import shutil
from pathlib import Path
from typing import Any

import torch

from ..runs import atomic_replace_dir, read_events
from .builtin import Pretrain, builtin_pretrain_config, ensure_builtin

RECORD_FILE = "recorded.json"
STORE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# The files of the model folder other than the weights and config that save_pretrained writes: the tokenizer.
_MODEL_FILES = ("model.safetensors", "config.json", "generation_config.json")


def builtin_eval_loss(model_dir: Path, preset: str) -> tuple[float, int]:
    """(mean loss, blocks) of the model in `model_dir` on the eval split of `preset`'s pretraining recipe: the same
    held-out blocks of builtin:corpus the pretraining evaluated on, tokenized by the model's own tokenizer. Computed
    in fp32 on the CPU, one block at a time (the mean of the blocks' mean token losses): deterministic, a few seconds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..data.build import build_train_data
    from ..models import compact  # noqa: F401  (registers compact_llm with the Auto classes)

    cfg = builtin_pretrain_config(preset)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    max_len = min(cfg.max_seq_len, model.config.max_position_embeddings)
    evals = build_train_data(cfg, tokenizer, max_len).evals
    losses = []
    with torch.no_grad():
        for block in evals:
            ids = torch.tensor([block["input_ids"]])
            losses.append(float(model(input_ids=ids, labels=torch.tensor([block["labels"]])).loss))
    return sum(losses) / len(losses), len(losses)


def ship_builtin(preset: str, runs_dir: Path, dest: Path, *, pretrain: Pretrain, store: str = "fp16",
                 command: str = "") -> dict[str, Any]:
    """Pretrain `preset` afresh into the runs folder, then write it to `dest` (presets/models/NAME) with its weights
    stored in `store` precision and a recorded.json; returns the record."""
    from transformers import AutoModelForCausalLM

    from ..models import compact  # noqa: F401

    built = ensure_builtin(preset, runs_dir, pretrain=pretrain, rebuild=True)
    done = next((e for e in reversed(read_events(built.parent)) if e.get("type") == "done"), {})
    losses: dict[str, float] = {}
    tmp = dest.with_name(f".{dest.name}.tmp")
    # the loss of every way to store the weights (read back in fp32), the stored one last: its folder is kept
    for name in sorted(STORE_DTYPES, key=lambda n: n == store):
        shutil.rmtree(tmp, ignore_errors=True)
        model = AutoModelForCausalLM.from_pretrained(str(built), dtype=torch.float32)
        model.to(STORE_DTYPES[name]).save_pretrained(str(tmp))
        losses[name], blocks = builtin_eval_loss(_with_tokenizer(built, tmp), preset)
    cfg = builtin_pretrain_config(preset)
    record = {
        "preset": preset,
        "made_by": command or f"python -m engine prepare-builtin {preset} --ship",
        "date": datetime.date.today().isoformat(),
        "recipe": {"dataset": cfg.dataset, "max_steps": cfg.max_steps, "max_seq_len": cfg.max_seq_len,
                   "micro_batch_size": cfg.micro_batch_size, "learning_rate": cfg.learning_rate, "seed": cfg.seed,
                   "eval_fraction": cfg.eval_fraction},
        "steps": done.get("steps"),
        "pretrain_seconds": done.get("duration_s"),
        "trainer_eval_loss": done.get("eval_loss"),
        "machine": f"{platform.machine()} {platform.system()}, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "stored_precision": store,
        "eval_loss": round(losses[store], 5),
        "eval_blocks": blocks,
        "eval_loss_by_stored_precision": {k: round(losses[k], 5) for k in STORE_DTYPES},
        "eval": "mean loss over the held-out blocks of the pretraining recipe's eval split (engine/training/ship.py "
                "builtin_eval_loss), weights read back in fp32 on the CPU",
    }
    (tmp / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_replace_dir(tmp, dest)
    return record


def _with_tokenizer(built: Path, folder: Path) -> Path:
    """Copy the tokenizer files of the built model folder into `folder` (beside its saved weights); returns it."""
    for path in built.iterdir():
        if path.is_file() and path.name not in _MODEL_FILES:
            shutil.copy2(path, folder / path.name)
    return folder


def read_record(folder: Path) -> dict[str, Any]:
    """The recorded.json of a shipped built-in model folder."""
    return json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
