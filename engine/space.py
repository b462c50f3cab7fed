"""Hugging Face Space demo mode: what one visitor may ask of a Space that many people share, decided before work starts.

A Space is a shared app (engine/sharing.py `decide` names ``SPACE_ID``) that strangers open at once, most often on the
free CPU hardware (2 vCPU, 16 GB). Demo mode is that case: shared, with ``SPACE_ID`` set (`demo_mode`). In demo mode

- every training run is bounded before it starts (`check_train_config`, called by engine/training/jobs.py
  `JobManager.start`): optimizer steps, epochs, sequence length and the base model's weight size are refused above the
  limits, each message naming the limit and the variable that raises it; the wall time is enforced while it runs (the
  job manager asks the run to stop, saving a checkpoint, once it has run `max_minutes`, and kills it a minute later);
- a second visitor's run waits in a queue instead of being refused (engine/training/jobs.py);
- the page says that runs disappear when the Space restarts unless it has persistent storage (`storage_notice_key`);
  with persistent storage (``/data``) the runs folder is ``/data/runs`` (engine/refs.py `default_runs_dir`);
- the page links to "Duplicate this Space" (`duplicate_url`), the way a visitor gets a Space (and a GPU) of their own.

The limits are one table of data, presets/space_limits.yaml, read by engine/space_limits.py (with the checks of every
field that costs time or memory: processes, generated answers, evaluations, the waiting line); they default to what the
free CPU Space finishes in minutes (the first run's 500 steps at 72 tokens take about a minute and a half on 2 vCPU) and
are raised or lowered by the Space's owner with the variables in `LIMIT_ENV` (Space settings → Variables). This module
sits beside engine/sharing.py at the bottom of the engine: it imports `errors`, `refs`, `sharing` and `space_limits`
(and, lazily, huggingface_hub and the model references to size a base model).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import EngineError
from .refs import BUILTIN_PREFIX, RUN_PREFIX, SPACE_DATA_DIR
from .sharing import hub_token, is_shared
from .space_limits import LIMIT_ENV, SpaceLimits, check_memory, check_run_cost, limits, num

__all__ = ["LIMIT_ENV", "SpaceLimits", "check_train_config", "demo_mode", "limits"]  # the limits live in engine/space_limits.py

SPACE_ID_ENV = "SPACE_ID"
# The front matter's `suggested_hardware` (README.md): what a duplicate of the Space is offered first (a T4: the hardware
# the app's GPU defaults are made for, fp16 and QLoRA).
SUGGESTED_HARDWARE = "t4-small"
# Weight files counted when a Hub model is sized from its file listing (the same suffixes as the playground's check).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
# Grace after the wall time before a run that did not stop by itself is killed (saving a checkpoint takes seconds).
KILL_GRACE_S = 60.0


def demo_mode(env: Any = None) -> bool:
    """Demo mode: a shared app on a Hugging Face Space (``SPACE_ID`` set)."""
    env = os.environ if env is None else env
    return bool(env.get(SPACE_ID_ENV)) and is_shared()


def check_train_config(cfg: Any, runs_dir: Path, *, lim: SpaceLimits | None = None, api: Any = None) -> None:
    """In demo mode, refuse a TrainConfig above the Space's limits before anything is loaded: every field that costs time
    or memory (engine/space_limits.py `check_run_cost`, from presets/space_limits.yaml), then the base model's size;
    nothing outside demo mode. The wall time is enforced while the run goes (engine/training/jobs.py)."""
    if not demo_mode():
        return
    lim = lim or limits()
    check_run_cost(cfg, lim)
    for ref in filter(None, (cfg.base_model, getattr(cfg, "teacher_model", ""))):
        gib = model_weights_gib(ref, runs_dir, api=api)
        if gib is not None and gib > lim.max_model_gib:
            raise EngineError(key="space.limit.max_model_gib", model=ref, value=f"{gib:.2f}", limit=num(lim.max_model_gib),
                              env=LIMIT_ENV["max_model_gib"])
    check_memory(cfg, lim)  # the estimator's prediction of the whole training, within the Space's memory


def model_weights_gib(ref: str, runs_dir: Path, *, api: Any = None) -> float | None:
    """GiB of weight files behind a model reference: a built-in's folder, a run's base (its adapter is small), a Hub
    model's file listing (nothing is downloaded). None when it cannot be told: a built-in not yet pretrained, or a Hub
    id while offline (nothing can be downloaded then either)."""
    if ref.startswith(BUILTIN_PREFIX):
        from .models.references import builtin_weights_dir

        folder = builtin_weights_dir(ref[len(BUILTIN_PREFIX):], runs_dir)
        return None if folder is None else _folder_gib(folder)
    if ref.startswith(RUN_PREFIX):
        from .models.references import resolve_model

        source = resolve_model(ref, runs_dir, allow_local_paths=False)
        while source.base is not None:
            source = source.base
        return _folder_gib(Path(source.location)) if source.is_local else model_weights_gib(source.location, runs_dir, api=api)
    from huggingface_hub import constants

    if api is None and constants.HF_HUB_OFFLINE:
        return None
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    try:
        info = api.model_info(ref, files_metadata=True, token=hub_token())
    except Exception as exc:  # noqa: BLE001 - every Hub failure becomes one message (no token is sent in shared mode)
        raise EngineError(key="playground.error.hub_listing", model=repr(ref), kind=type(exc).__name__) from None
    return sum((f.size or 0) for f in (info.siblings or []) if f.rfilename.endswith(WEIGHT_SUFFIXES)) / 2**30


def _folder_gib(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)) / 2**30


def duplicate_url(env: Any = None) -> str | None:
    """The "Duplicate this Space" address of the Space this app runs in (None elsewhere): the Hub's duplicate dialog,
    which offers the front matter's suggested hardware."""
    env = os.environ if env is None else env
    space = str(env.get(SPACE_ID_ENV, "")).strip()
    if not space or "/" not in space:
        return None
    return f"https://huggingface.co/spaces/{space}?duplicate=true"


def persistent_storage() -> bool:
    """The Space has persistent storage: /data exists and this process can write to it."""
    return SPACE_DATA_DIR.is_dir() and os.access(SPACE_DATA_DIR, os.W_OK | os.X_OK)


def storage_notice_key(runs_dir: Path) -> str:
    """The language-file key of the storage notice: runs kept on persistent storage, or lost at the next restart."""
    try:
        kept = Path(runs_dir).resolve().is_relative_to(SPACE_DATA_DIR.resolve()) and persistent_storage()
    except OSError:
        kept = False
    return "space.storage.persistent" if kept else "space.storage.ephemeral"


def limits_params(lim: SpaceLimits | None = None) -> dict[str, str]:
    """The limits as parameters of the page's notice (`space.limits`)."""
    lim = lim or limits()
    return {"steps": str(lim.max_steps), "epochs": num(lim.max_epochs), "minutes": num(lim.max_minutes),
            "seq_len": str(lim.max_seq_len), "gib": num(lim.max_model_gib)}
