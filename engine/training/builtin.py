"""The built-in compact models: pretrained on the built-in corpus on first use, cached in <runs>/_builtin/<preset>/model.

`ensure_builtin` is called by a run whose base or teacher is `builtin:NAME` (engine/training/run.py,
engine/training/distill.py) and by `python -m engine prepare-builtin`. The pretraining itself is an ordinary
scratch run, so the training function is handed in by the caller (`pretrain=run_training`): run.py imports this
module, and importing run.py back from here would make the two modules a cycle.
"""

from __future__ import annotations

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


def ensure_builtin(preset: str, runs_dir: Path, parent_events: EventLog | None = None, *, pretrain: Pretrain) -> Path:
    """Return the folder of the pretrained built-in preset, pretraining it first (with `pretrain`) if needed."""
    from ..models.references import builtin_model_dir

    model_dir = builtin_model_dir(preset, runs_dir)
    # Several processes: all ranks pretrain it together (run_training is rank-aware), so they must agree
    # on whether it is needed (machines without a shared disk may disagree).
    if not distributed.any_rank(not (model_dir / "config.json").exists()):
        return model_dir
    run_dir = model_dir.parent
    if parent_events is not None:
        parent_events.write("phase", phase=f"pretraining the built-in model '{preset}' on the built-in corpus (first use only)")
    resume = last_complete_checkpoint(run_dir) is not None if run_dir.exists() else False
    result = pretrain(builtin_pretrain_config(preset), run_dir, runs_dir=runs_dir, resume=resume, mirror=parent_events)
    if result.get("type") == "stopped":  # the run that asked for the base was stopped (its STOP file stops this too)
        raise RunStopped(f"Stopped while pretraining the built-in model '{preset}'; Resume continues from its last checkpoint.")
    if not (model_dir / "config.json").exists():
        raise JobError(f"Pretraining the built-in model '{preset}' did not finish; see {run_dir / 'train.log'}.")
    return model_dir
