"""The built-in dataset `builtin:date-mistakes`: preference pairs made, when the run starts, from the starting model's own
mistakes on the date task (engine/inference/mistakes.py), for DPO, ORPO and KTO.

The run loads its base model (say run:my-sft), which answers 256 date prompts it was not fine-tuned on greedily and
three times sampled; each distinct wrong answer becomes a pair (the expected date chosen, the model's answer rejected). The
pairs are written to the run folder (`mistakes.jsonl`, reused when the run resumes, so a resumed run trains on the same
pairs) and the run reads that file like any uploaded pair file. docs/preference.md measures why: pairs of the mistakes
the model actually makes move its date accuracy, pairs of invented mistakes do not.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..errors import DataError
from ..objectives import MISTAKES_DATASET
from ..runs import EventLog

PAIRS_FILE = "mistakes.jsonl"
# At most this many passes over the pairs: a base that already does the task makes few mistakes, and the form's 250
# steps of 8 pairs would read each of a few dozen pairs dozens of times. Measured from an SFT run at 88% on the dates it
# was trained on (19 pairs): 250 steps lowered the date task (ORPO 88% -> 62-78%, DPO -> 32-45%), 4 passes kept DPO at
# 87-88% (docs/preference.md). A 22% start makes ~650 pairs: the form's steps stay under the cap.
MAX_PASSES = 4


def is_mistake_data(cfg: TrainConfig) -> bool:
    """Whether the run's pairs are made from its starting model's mistakes."""
    return cfg.dataset == MISTAKES_DATASET


def capped_steps(cfg: TrainConfig, pairs: int) -> int | None:
    """The steps that read `pairs` pairs at most MAX_PASSES times (KTO reads a pair as two rows), when cfg asks for more;
    None when cfg's steps stay (fewer, or a run by epochs)."""
    rows = pairs * (2 if cfg.method == "kto" else 1)
    cap = max(1, math.ceil(MAX_PASSES * rows / max(1, cfg.micro_batch_size * cfg.grad_accum)))
    return cap if cfg.max_steps > cap else None


def with_mistake_pairs(cfg: TrainConfig, model: Any, tokenizer: Any, run_dir: Path, events: EventLog) -> tuple[TrainConfig, dict[str, Any] | None]:
    """`cfg` reading the pairs of the starting model's mistakes (made now, or kept from before the run resumed), its
    steps capped at MAX_PASSES passes over them (`capped_steps`, said in the run's log), and what sampling found (None
    when the pairs were kept); DataError (keyed) when the model made no mistake to pair."""
    path = Path(run_dir) / PAIRS_FILE
    found = None
    if not (path.exists() and path.stat().st_size > 0):
        found = _make_pairs(cfg, model, tokenizer, path, events)
    cfg = dataclasses.replace(cfg, dataset=str(path))
    pairs = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    steps = capped_steps(cfg, pairs)
    if steps is not None:  # the same on a resume: the kept pairs give the same cap, the checkpoint's schedule matches
        events.write("mistakes_steps", pairs=pairs, steps=steps, asked=cfg.max_steps, passes=MAX_PASSES)
        cfg = dataclasses.replace(cfg, max_steps=steps)
    return cfg, found


def _make_pairs(cfg: TrainConfig, model: Any, tokenizer: Any, path: Path, events: EventLog) -> dict[str, Any]:
    """Sample the starting model on the date prompts, write the pairs of its mistakes to `path`; what was found."""
    from ..inference.mistakes import mistake_pairs, mistake_prompts, write_pairs

    events.write("phase", phase="making pairs from the starting model's mistakes on the date task")
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        elapsed = time.monotonic() - started
        events.write("mistakes_progress", done=done, total=total, elapsed_s=round(elapsed, 1),
                     eta_s=round(elapsed / done * (total - done), 1) if done else None)

    padding = tokenizer.padding_side
    pairs, stats = mistake_pairs(model, tokenizer, mistake_prompts(), seed=cfg.seed, on_progress=progress)
    tokenizer.padding_side = padding
    if not pairs:
        raise DataError(key="pref_run.no_mistakes", n=stats.prompts, correct=stats.correct, answers=stats.answers)
    write_pairs(pairs, path)
    found = {**stats.as_dict(), "seconds": round(time.monotonic() - started, 1)}
    events.write("mistakes", **found)
    return found
