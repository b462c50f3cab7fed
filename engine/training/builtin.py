"""The built-in compact models: shipped pretrained (compact-mini, in presets/models/), or pretrained on the built-in
corpus on first use and cached in <runs>/_builtin/<preset>/model.

`ensure_builtin` is called by a run whose base or teacher is `builtin:NAME` (engine/training/run.py,
engine/training/distill.py) and by `python -m engine prepare-builtin`. A copy in the runs folder wins over the
shipped one (engine/models/references.py `builtin_weights_dir`), so `--rebuild` replaces the model every run uses
without touching the repository. The pretraining itself is an ordinary scratch run, so the training function is
handed in by the caller (`pretrain=run_training`): run.py imports this module, and importing run.py back from here
would make the two modules a cycle. Shipping a fresh copy into the repository (`--ship`): engine/training/ship.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..errors import JobError, RunStopped
from ..hardware import distributed
from ..runs import EventLog, last_complete_checkpoint

# engine.training.run.run_training: (cfg, run_dir, *, runs_dir, resume, mirror) -> the final event
Pretrain = Callable[..., dict[str, Any]]


def builtin_pretrain_config(preset: str) -> TrainConfig:
    """The recipe that pretrains a built-in compact preset on the built-in corpus."""
    from ..models.compact import compact_presets

    info = compact_presets()[preset]
    return TrainConfig(
        method="scratch",
        base_model=f"builtin:{preset}",
        dataset="builtin:corpus",
        max_seq_len=int(info.get("pretrain_seq_len", info["max_position_embeddings"])),
        max_steps=int(info.get("pretrain_steps", 600)),
        learning_rate=float(info.get("pretrain_lr", 1e-3)),
        lr_scheduler="cosine",
        warmup_ratio=0.05,
        micro_batch_size=int(info.get("pretrain_batch", 16)),
        grad_accum=1,
        eval_fraction=0.05,
        save_steps=200,
        logging_steps=10,
        run_name=preset,
    )


def ensure_builtin(preset: str, runs_dir: Path, parent_events: EventLog | None = None, *, pretrain: Pretrain,
                   rebuild: bool = False) -> Path:
    """Return the folder of the pretrained built-in preset (a copy in the runs folder, else the shipped one),
    pretraining it first (with `pretrain`) into the runs folder if there is neither, or always with `rebuild`."""
    from ..models.references import builtin_model_dir, builtin_weights_dir

    model_dir = builtin_model_dir(preset, runs_dir)
    run_dir = model_dir.parent
    ready = builtin_weights_dir(preset, runs_dir)
    # Several processes: all ranks pretrain it together (run_training is rank-aware), so they must agree
    # on whether it is needed (machines without a shared disk may disagree).
    if not rebuild and not distributed.any_rank(ready is None) and ready is not None:
        return ready
    if rebuild and distributed.is_main_process() and run_dir.exists():
        shutil.rmtree(run_dir)  # a fresh pretraining: no checkpoint of the old one may be resumed
    distributed.barrier()
    if parent_events is not None:
        parent_events.write("phase", phase=f"pretraining the built-in model '{preset}' on the built-in corpus" + ("" if rebuild else " (first use only)"))
    resume = last_complete_checkpoint(run_dir) is not None if run_dir.exists() else False
    result = pretrain(builtin_pretrain_config(preset), run_dir, runs_dir=runs_dir, resume=resume, mirror=parent_events)
    if result.get("type") == "stopped":  # the run that asked for the base was stopped (its STOP file stops this too)
        raise RunStopped(key="firstrun.msg.pretraining_stopped", name=preset)
    if not (model_dir / "config.json").exists():
        raise JobError(key="firstrun.msg.pretraining_unfinished", name=preset, log=str(run_dir / "train.log"))
    return model_dir
