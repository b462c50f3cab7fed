"""The built-in dataset `builtin:date-mistakes`: preference pairs made, when the run starts, from the starting model's own
mistakes on the date task (engine/inference/mistakes.py), for DPO, ORPO and KTO.

The run loads its base model (say run:my-sft), which answers the first 256 of the date task's training prompts greedily and
three times sampled; each distinct wrong answer becomes a pair (the expected date chosen, the model's answer rejected). The
pairs are written to the run folder (`mistakes.jsonl`, reused when the run resumes, so a resumed run trains on the same
pairs) and the run reads that file like any uploaded pair file. docs/preference.md measures why: pairs of the mistakes
the model actually makes move its date accuracy, pairs of invented mistakes do not.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..errors import DataError
from ..objectives import MISTAKES_DATASET
from ..runs import EventLog

PAIRS_FILE = "mistakes.jsonl"


def is_mistake_data(cfg: TrainConfig) -> bool:
    """Whether the run's pairs are made from its starting model's mistakes."""
    return cfg.dataset == MISTAKES_DATASET


def with_mistake_pairs(cfg: TrainConfig, model: Any, tokenizer: Any, run_dir: Path, events: EventLog) -> tuple[TrainConfig, dict[str, Any] | None]:
    """`cfg` reading the pairs of the starting model's mistakes (made now, or kept from before the run resumed), and
    what sampling found (None when the pairs were kept); DataError (keyed) when the model made no mistake to pair."""
    from ..inference.mistakes import N_PROMPTS, mistake_pairs, write_pairs
    from ..inference.tasks import date_items

    path = Path(run_dir) / PAIRS_FILE
    if path.exists() and path.stat().st_size > 0:
        return dataclasses.replace(cfg, dataset=str(path)), None
    events.write("phase", phase="making pairs from the starting model's mistakes on the date task")
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        elapsed = time.monotonic() - started
        events.write("mistakes_progress", done=done, total=total, elapsed_s=round(elapsed, 1),
                     eta_s=round(elapsed / done * (total - done), 1) if done else None)

    padding = tokenizer.padding_side
    pairs, stats = mistake_pairs(model, tokenizer, date_items("train", N_PROMPTS), seed=cfg.seed, on_progress=progress)
    tokenizer.padding_side = padding
    if not pairs:
        raise DataError(key="pref_run.no_mistakes", n=stats.prompts, correct=stats.correct, answers=stats.answers)
    write_pairs(pairs, path)
    found = {**stats.as_dict(), "seconds": round(time.monotonic() - started, 1)}
    events.write("mistakes", **found)
    return dataclasses.replace(cfg, dataset=str(path)), found
