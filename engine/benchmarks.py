"""The curated list of benchmarks (presets/benchmarks.yaml) as records, the check of a job's task names against it, and where a
model's benchmark results are kept.

Data, read once: the harness itself (lm-evaluation-harness, engine/inference/harness.py) is imported only by the job that runs
it, so the form, the CLI's validation and the page know the tasks without the optional package installed.

Where results live (engine/training/bench_job.py writes there, engine/views/bench_view.py reads):

    <runs>/<run>/benchmarks/                a run, scored with its adapter applied (a mixed run is a run like any other)
    <runs>/_benchmarks/<model>-<precision>/ a model that is not a run (a built-in model, a Hub id, a run's base),
                                            one folder per model and precision, shared by every run of that base
        results/<task>.json   one file per finished task (written when the task finishes: a restarted job skips it)
        bench_events.jsonl    the job's events; bench.log its log; bench.pid its process while it runs
        tasks/                the local tasks' files, written at run time (the harness's own task format)
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import ConfigError

BENCH_FILE = Path(__file__).resolve().parent.parent / "presets" / "benchmarks.yaml"
BASE_FOLDER = "_benchmarks"  # under the runs dir: names starting with "_" are never listed as runs (engine/training/jobs.py)
RUN_FOLDER = "benchmarks"  # inside a run's folder
LOCAL = "local"  # the `dataset` of a task this app writes from its own data (no download)


@dataclass(frozen=True)
class BenchTask:
    """One entry of presets/benchmarks.yaml (its header says what each field means)."""

    name: str
    language: str
    kind: str
    size: int
    split: str
    dataset: str
    limit: int
    metric: str = "acc"
    chat: bool = False
    approx: bool = False
    cpu_s: float | None = None
    t4_s: float | None = None

    @property
    def local(self) -> bool:
        """Written by this app from its own data: runs offline, nothing to download."""
        return self.dataset == LOCAL


@functools.cache
def bench_tasks() -> dict[str, BenchTask]:
    """The curated tasks by name, in the file's order."""
    data = yaml.safe_load(BENCH_FILE.read_text(encoding="utf-8")) or {}
    return {row["name"]: BenchTask(**row) for row in data.get("tasks", [])}


def parse_task_names(text: str) -> list[str]:
    """'dates_mc, arc_pt' -> ['dates_mc', 'arc_pt'] (commas or spaces; each name once, in the order given)."""
    names: list[str] = []
    for name in re.split(r"[,\s]+", str(text or "")):
        if name and name not in names:
            names.append(name)
    return names


def check_task_names(text: str) -> list[str]:
    """The task names of `text`; ConfigError on the `tasks` field when it names none or one outside the curated list (the message
    lists the allowed names)."""
    names, known = parse_task_names(text), bench_tasks()
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise ConfigError("tasks", ", ".join(unknown) if unknown else text, allowed_key="bench.allowed.tasks", owner="BenchConfig",
                          names=", ".join(known))
    return names


def model_slug(ref: str, quant: str) -> str:
    """The folder name under <runs>/_benchmarks of a model reference in a precision: 'builtin:compact-mini', 'none' ->
    'builtin-compact-mini-none'; 'Qwen/Qwen2.5-0.5B', '4bit' -> 'Qwen--Qwen2.5-0.5B-4bit'."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", ref.replace("/", "--")).strip("-.") or "model"
    return f"{safe}-{quant}"
