"""Run folders: where runs live, atomic writes, the events log, checkpoints, and run summaries.

A run is a folder under the runs directory:

    <runs>/<name>/config.yaml     the resolved TrainConfig (never a token)
                  events.jsonl    one JSON object per line, appended by the training process
                  train.log       everything the training process logs (stdout + stderr)
                  pid             "<pid> <start-time>" of the training process while it may be alive
                  checkpoint-N/   resumable Trainer checkpoints (complete once trainer_state.json parses)
                  adapter/ | model/   the final output, renamed into place only when complete
                  STOP            written by whoever asks the run to stop (the run saves and exits)
                  mix.yaml        only in a run that mixes other runs' adapters (engine/training/mix.py)

Built-in compact models are pretrained once into <runs>/_builtin/<preset>/ (same layout).
The runs directory is `$COMPACT_LAB_RUNS` if set, else ./runs (Colab's launcher points it at Drive): engine/refs.py
`default_runs_dir`, with the run-name rule.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import TrainConfig
from .errors import ConfigError, JobError
from .fields import from_dict, to_dict
from .refs import is_valid_run_name

_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")
# Where the Trainer writes a checkpoint before it is renamed to <run>/checkpoint-N (engine/training/trainer.py): a
# process killed mid-save (a Colab disconnect) leaves its half-written folder here, never under a name resume reads.
CHECKPOINT_STAGING = ".checkpoint-staging"
MIX_FILE = "mix.yaml"  # a run made by mixing other runs' adapters (engine/training/mix.py): never resumed as a training run


def run_path(runs_dir: Path, name: str) -> Path:
    """The folder of run `name`, refusing anything that could escape the runs directory."""
    if not is_valid_run_name(name):
        raise JobError(key="error.runs.run_name", name=repr(name))
    return Path(runs_dir) / name


# --------------------------------------------------------------------------------------------------
# Atomic writes: write to a temp name in the same folder, then rename (a crash never leaves a
# half-written file that looks complete).
# --------------------------------------------------------------------------------------------------


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_replace_dir(tmp_dir: Path, final_dir: Path) -> None:
    """Move a fully written temp folder into place (replacing an older one)."""
    final_dir = Path(final_dir)
    if final_dir.exists():
        old = final_dir.with_name(f".{final_dir.name}.old-{int(time.time() * 1000)}")
        os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp_dir, final_dir)


# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------


def save_config(run_dir: Path, cfg: TrainConfig) -> Path:
    from .hardware.distributed import is_main_process

    path = Path(run_dir) / "config.yaml"
    if is_main_process():  # under a multi-process launch every rank calls this; one writer is enough
        atomic_write_text(path, config_yaml(cfg))
    return path


def config_yaml(cfg: TrainConfig) -> str:
    header = "# Compact LLM Lab run config. Reproduce headless with: python -m engine train --config config.yaml\n"
    return header + yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True)


MAX_CONFIG_CHARS = 64_000


def load_config(path: Path) -> TrainConfig:
    """Read and validate a run config YAML (ConfigError names the bad field)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        # A run config is a flat mapping of a few KB: anything far larger or deeply nested is damaged (and parsing
        # thousands of nested brackets costs seconds on every listing of the runs).
        if len(text) > MAX_CONFIG_CHARS or max((len(m) for m in re.findall(r"[\[{]+", text)), default=0) > 16:
            raise ConfigError("config", path.name, allowed_key="error.runs.allowed.flat", max=MAX_CONFIG_CHARS)
        data = yaml.safe_load(text)
    except FileNotFoundError:
        raise ConfigError("config", str(path), allowed_key="error.runs.allowed.exists") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("config", path.name, allowed_key="error.runs.allowed.utf8", byte=exc.start) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise ConfigError("config", path.name, allowed_key="error.runs.allowed.yaml", kind=type(exc).__name__,
                          detail=str(exc).splitlines()[0][:200] if str(exc) else "") from None
    if not isinstance(data, dict):
        raise ConfigError("config", str(path), allowed_key="error.runs.allowed.mapping")
    return from_dict(TrainConfig, data)


# --------------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------------


class EventLog:
    """Append-only JSON-lines writer. Each line is written with one write() call and flushed, so a
    reader never sees a partial object except possibly the very last line (which readers skip).

    Under a multi-process launch (engine/hardware/distributed.py) only rank 0 writes: the other ranks run the same
    code, and their copies of each event would be duplicates. `all_ranks=True` is for the error log of the
    CLI, where a failure of rank 1 alone must still reach the UI (tagged with its rank)."""

    def __init__(self, path: Path, extra: dict[str, Any] | None = None, *, all_ranks: bool = False) -> None:
        from .hardware.distributed import is_distributed, is_main_process, rank

        self.path = Path(path)
        self.extra = extra or {}
        if all_ranks and is_distributed():
            self.extra = {**self.extra, "rank": rank()}
        self.enabled = all_ranks or is_main_process()
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, type_: str, **data: Any) -> dict[str, Any]:
        event = {"type": type_, "time": round(time.time(), 3), **self.extra, **data}
        if not self.enabled:
            return event  # a non-main rank: same return value, nothing written
        line = json.dumps(event, ensure_ascii=False, default=str) + "\n"
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
        return event


def read_events(run_dir: Path, name: str = "events.jsonl") -> list[dict[str, Any]]:
    """All complete events of a run (a torn last line is ignored); `name`: another event file of the run (a merge's)."""
    path = Path(run_dir) / name
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def log_tail(run_dir: Path, n_lines: int = 30) -> str:
    path = Path(run_dir) / "train.log"
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 64_000))
        data = fh.read().decode("utf-8", errors="replace")
    # tqdm progress bars use carriage returns; keep the last state of each line
    lines = [ln.split("\r")[-1] for ln in data.splitlines()]
    return "\n".join(lines[-n_lines:])


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


def is_complete_checkpoint(path: Path) -> bool:
    """Trainer writes trainer_state.json last; a checkpoint is complete when it parses and weights exist."""
    state = Path(path) / "trainer_state.json"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    has_weights = any(Path(path).glob("*.safetensors")) or any(Path(path).glob("*.bin"))
    return has_weights


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    out = []
    for p in Path(run_dir).iterdir() if Path(run_dir).exists() else []:
        m = _CKPT_RE.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def last_complete_checkpoint(run_dir: Path) -> Path | None:
    for _, path in reversed(checkpoints(run_dir)):
        if is_complete_checkpoint(path):
            return path
    return None


def discard_incomplete_checkpoints(run_dir: Path) -> list[str]:
    """Remove checkpoint folders a killed process left half-written (so resume never picks them), the staging folder of
    a save that never finished included."""
    removed = []
    staging = Path(run_dir) / CHECKPOINT_STAGING
    if staging.exists():
        removed += [f"{CHECKPOINT_STAGING}/{p.name}" for p in staging.iterdir()]
        shutil.rmtree(staging, ignore_errors=True)
    for _, path in checkpoints(run_dir):
        if not is_complete_checkpoint(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


# --------------------------------------------------------------------------------------------------
# Run summaries (history table, playground choices)
# --------------------------------------------------------------------------------------------------


@dataclass
class RunSummary:
    name: str
    path: Path
    state: str  # running | finished | stopped | failed | killed | created | queued | damaged (config.yaml unreadable)
    method: str = ""
    base_model: str = ""
    dataset: str = ""
    step: int = 0
    max_steps: int = 0
    last_loss: float | None = None
    best_eval_loss: float | None = None
    duration_s: float | None = None
    predicted_gib: float | None = None
    measured_gib: float | None = None
    output: str | None = None  # "adapter" | "model" when finished
    error: str | None = None
    error_kind: str | None = None  # "oom" | "engine" | "nan" (the loss diverged) | "crash"
    error_record: dict[str, Any] | None = None  # the error's key and parameters (errors.render_record shows it in a language)
    resumable: bool = False  # it has a complete checkpoint: Resume continues from there
    restartable: bool = False  # stopped/failed/killed before any checkpoint: Resume starts it again from step 0, same settings
    started: float | None = None
    losses: list[dict[str, Any]] = field(default_factory=list)
    phase: str = ""
    task_scores: dict[str, float] = field(default_factory=dict)
    device: str = ""
    base_progress: dict[str, Any] | None = None  # latest progress of a built-in base pretraining for this run
    last_progress: dict[str, Any] | None = None  # latest progress event (speed, ETA) of this run
    # a queued run (waiting for its turn, engine/training/queue.py): its place and expected wait, filled by the job manager
    queue_position: int | None = None
    queue_wait_s: float | None = None
    queue_behind: str | None = None  # the run training now
    queue_device: str | None = None  # that run's device ("cpu" | "cuda"), for the wording of the wait
    phase_since: float | None = None  # when the current phase began (its event's time)
    phase_progress: dict[str, Any] | None = None  # the current phase's own progress (the date task's answers: task_progress)
    task_seconds: dict[str, float] = field(default_factory=dict)  # how long each date-task measurement took (before, after)


def summarize(run_dir: Path, alive: bool) -> RunSummary:
    """Fold a run's events into its current state. `alive`: is its process still running?"""
    run_dir = Path(run_dir)
    events = read_events(run_dir)
    summary = RunSummary(name=run_dir.name, path=run_dir, state="created")
    try:
        cfg = load_config(run_dir / "config.yaml")
        summary.method, summary.base_model, summary.dataset = cfg.method, cfg.base_model, cfg.dataset
    except ConfigError as exc:
        damaged = str(exc)  # a config.yaml that cannot be read: shown as "damaged", and nothing else breaks
    else:
        damaged = None
    terminal = None
    for ev in events:
        t = ev.get("type")
        if t == "start":
            summary.started = summary.started or ev.get("time")
            summary.device = ev.get("device_kind", summary.device)  # "cuda" | "cpu"
            terminal = None
            summary.error = None
        elif t == "base_progress":
            summary.base_progress = ev
            if ev.get("loss") is not None:  # the built-in base's pretraining, plotted as its own series
                summary.losses.append({"step": ev["step"], "loss": ev["loss"], "kind": "pretraining"})
        elif t == "phase":
            summary.phase = ev.get("phase", "")
            summary.phase_since, summary.phase_progress = ev.get("time"), None
        elif t in ("task_progress", "mistakes_progress"):  # a phase's own progress (answers so far)
            summary.phase_progress = ev
        elif t == "progress":
            summary.last_progress = ev
            summary.step = ev.get("step", summary.step)
            summary.max_steps = ev.get("max_steps", summary.max_steps)
            if ev.get("loss") is not None:
                summary.last_loss = ev["loss"]
                summary.losses.append({"step": ev["step"], "loss": ev["loss"], "kind": "train"})
            if ev.get("mem_gib") is not None:
                summary.measured_gib = max(summary.measured_gib or 0.0, ev["mem_gib"])
        elif t == "eval":
            loss = ev.get("eval_loss")
            if loss is not None:
                summary.losses.append({"step": ev["step"], "loss": loss, "kind": "eval"})
                summary.best_eval_loss = loss if summary.best_eval_loss is None else min(summary.best_eval_loss, loss)
        elif t == "memory":
            summary.predicted_gib = ev.get("predicted_gib")
        elif t == "task_score":
            summary.task_scores[ev.get("when", "?")] = ev.get("accuracy")
            if ev.get("seconds") is not None:
                summary.task_seconds[ev.get("when", "?")] = ev["seconds"]
        elif t in ("done", "stopped", "error"):
            terminal = ev
    if terminal is not None:
        t = terminal["type"]
        summary.state = {"done": "finished", "stopped": "stopped", "error": "failed"}[t]
        if t == "done":
            summary.output = terminal.get("output")
            summary.step = terminal.get("steps", summary.step)
            summary.max_steps = summary.max_steps or summary.step
            summary.measured_gib = terminal.get("peak_gib", summary.measured_gib)
        if t == "error":
            summary.error = terminal.get("message")
            summary.error_kind = terminal.get("kind")
            summary.error_record = terminal.get("i18n")
        if summary.started:
            summary.duration_s = round(terminal["time"] - summary.started, 1)
    elif events:
        summary.state = "running" if alive else "killed"
    if alive:
        summary.state = "running"
    elif (run_dir / "queued").exists():  # waiting in the line (engine/training/queue.py QUEUED_FILE)
        summary.state, summary.resumable = "queued", False
        return summary
    elif damaged is not None and (run_dir / "config.yaml").exists():
        summary.state, summary.error, summary.output = "damaged", damaged, None
        return summary
    summary.resumable = summary.state in ("stopped", "failed", "killed") and last_complete_checkpoint(run_dir) is not None
    # No checkpoint (a run that failed while loading, or was stopped before its first save): nothing to resume from, but
    # Resume starts it again from step 0 with the same config; the page says which of the two it will do.
    summary.restartable = summary.state in ("stopped", "failed", "killed") and not summary.resumable and (run_dir / "config.yaml").exists()
    if (run_dir / MIX_FILE).exists():  # a mix: its "data" are its parents, and a failed one is mixed again, not trained
        summary.restartable = summary.resumable = False
        summary.dataset = _mix_parents(run_dir / MIX_FILE) or summary.dataset
    return summary


def _mix_parents(path: Path) -> str:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return ""
    return f"mix of {' + '.join(str(data.get('parents', '')).split(','))} ({data.get('combination', '?')})" if isinstance(data, dict) else ""
