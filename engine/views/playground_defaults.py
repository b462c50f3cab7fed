"""What the Playground starts with, and what "Try it in the Playground" fills in: the model, an example prompt taken
from that model's own data, single-turn or a kept conversation, the mode and the decoding preset; and Compare's
"the same base, before and after training" pair with the sentence that explains it.

The rules, in plain words:
- the playground opens on the newest finished run (run:NAME), else on the built-in model; a Hugging Face model is
  never a default (it may need a download, and offline it cannot load);
- a run trained on a task-style dataset (builtin:dates, or instruction rows whose answers are a few words) answers
  each prompt on its own: a second question must not be read as the continuation of the first (the date model
  would answer it with "2"); instruction and chat data keep the conversation; a run on plain text continues text;
- the example prompt is a real row of the run's eval data (or of its training data), the canonical date prompt for a
  date run, and a neutral question in the visitor's language for a base model;
- on a shared app a run trained on an uploaded file shows the neutral question: the file's rows are its visitor's own
  (docs/security.md), and the page of every other visitor would carry them;
- a fine-tuned example shipped with the app (builtin:compact-mini-dates, engine/export/example.py) counts as a run on
  its data: before any run has finished, Compare opens on it and its base, so before/after shows at once.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import i18n
from ..errors import EngineError
from ..refs import BUILTIN_PREFIX, MERGED_SUFFIX, RUN_PREFIX, UPLOADS_DIRNAME
from ..sharing import is_shared

if TYPE_CHECKING:
    from ..config import TrainConfig
    from ..runs import RunSummary
    from ..training.jobs import JobManager

DEFAULT_MODEL = "builtin:compact-mini"
DATES_DATASET = "builtin:dates"
DATES_PROMPT = "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD)."  # its answer is 2023-09-05
TASK_ANSWER_WORDS = 3  # instruction rows whose typical answer is this short are a task (a label, a date, a number)
MAX_EXAMPLE_CHARS = 500
TEXT_EXAMPLE_WORDS = 8  # a run on plain text is shown the start of a paragraph to continue


@dataclass(frozen=True)
class Start:
    """What the playground shows for one model."""

    model: str | None
    example: str  # the prompt box's value
    keep: bool  # keep the conversation (multi-turn) or answer each prompt on its own
    mode: str  # "chat" or "completion"
    preset: str  # a decoding preset of presets/generation.yaml
    style: str  # "task", "instruction", "chat", "text" (a run's data) or "base" (no run)


def learned(s: RunSummary) -> bool | None:
    """Did the run learn its task, by its recorded date-task scores: after training above before (or above zero when
    only the after score was recorded); None when it was not scored (a run on other data: nothing says it failed)."""
    after = s.task_scores.get("after")
    if after is None:
        return None
    return after > (s.task_scores.get("before") or 0.0)


def newest_finished(jobs: JobManager) -> RunSummary | None:
    """The finished run that ended last, among those that learned (`learned`: a run whose date-task score did not rise,
    the model that answers gibberish, is never the one a page opens on); a run folder touched later, e.g. by a merge,
    does not count as newer."""
    runs = [s for s in jobs.finished_runs() if learned(s) is not False]
    if not runs:
        return None

    def ended(s: RunSummary) -> float:
        if s.started is not None:
            return s.started + (s.duration_s or 0.0)
        return s.path.stat().st_mtime

    return max(runs, key=ended)


def default_model(jobs: JobManager) -> str:
    """The playground's model when a page opens: the newest finished run that learned, else the built-in model."""
    run = newest_finished(jobs)
    return f"{RUN_PREFIX}{run.name}" if run is not None else DEFAULT_MODEL


def run_name(ref: str | None) -> str | None:
    """NAME of run:NAME or run:NAME/merged; None for any other reference."""
    ref = (ref or "").strip()
    if not ref.startswith(RUN_PREFIX):
        return None
    name = ref[len(RUN_PREFIX):]
    return name[: -len(MERGED_SUFFIX)] if name.endswith(MERGED_SUFFIX) else name


def run_config(runs_dir: Path, ref: str | None) -> TrainConfig | None:
    """The TrainConfig a run was trained with (None: not a run, or its config.yaml is missing or damaged)."""
    from ..refs import is_valid_run_name
    from ..runs import load_config

    name = run_name(ref)
    if not name or not is_valid_run_name(name):
        return None
    try:
        return load_config(Path(runs_dir) / name / "config.yaml")
    except EngineError:
        return None


def shipped_example(ref: str | None) -> dict | None:
    """The record of a fine-tuned example shipped with the app (builtin:NAME of engine/export/example.py), else None."""
    from ..models.references import shipped_examples

    ref = (ref or "").strip()
    return shipped_examples().get(ref[len(BUILTIN_PREFIX):]) if ref.startswith(BUILTIN_PREFIX) else None


def compare_pair(jobs: JobManager, runs: bool = True) -> tuple[str, str | None]:
    """Compare's (model A, model B): the newest finished run's base (before training) and that run (after); without a
    finished run, a shipped fine-tuned example's base and that example; without either, the built-in model and nothing.
    runs=False: as without a finished run (what the page is built with: runs are a session's, filled when it loads)."""
    from ..models.references import shipped_examples

    run = newest_finished(jobs) if runs else None
    if run is None:
        example = next(iter(shipped_examples()), None)
        return (run_base(jobs.runs_dir, f"{BUILTIN_PREFIX}{example}"), f"{BUILTIN_PREFIX}{example}") if example else (DEFAULT_MODEL, None)
    return run_base(jobs.runs_dir, f"{RUN_PREFIX}{run.name}"), f"{RUN_PREFIX}{run.name}"


def run_base(runs_dir: Path, ref: str) -> str:
    """The model a run (or a shipped example) started from (its base_model), the built-in model when it cannot be read."""
    if (record := shipped_example(ref)) is not None:
        return str(record["base_model"])
    cfg = run_config(runs_dir, ref)
    return cfg.base_model if cfg is not None and cfg.base_model else DEFAULT_MODEL


def compare_note(runs_dir: Path, model_a: str | None, model_b: str | None, lang: str) -> str:
    """The sentence above Compare that says what the two models are: "the base before training, the run after" when B
    is a run and A its base, else just their names."""
    model_a = model_a or DEFAULT_MODEL
    if not model_b:
        return i18n.t("playground.compare.note_no_run", lang, a=model_a)
    if (run_name(model_b) or shipped_example(model_b)) and run_base(runs_dir, model_b) == model_a:
        return i18n.t("playground.compare.note_pair", lang, a=model_a, b=model_b)
    return i18n.t("playground.compare.note_any", lang, a=model_a, b=model_b)


@functools.lru_cache(maxsize=32)
def _rows(source: str, columns: str, stamp: float) -> tuple[str, tuple[dict[str, Any], ...]]:
    """(format, first rows) of a built-in or uploaded dataset; `stamp` (the file's mtime) keeps the cache honest."""
    from ..data.formats import load_records
    from ..refs import parse_columns

    records = load_records(source, columns=parse_columns(columns))
    return records.format, tuple(records.records[:200])


def data_rows(source: str, columns: str = "") -> tuple[str, tuple[dict[str, Any], ...]] | None:
    """(format, first rows) of a run's dataset, or None when it cannot be read here: a Hub dataset (it may need the
    network), a file that is gone, a damaged file."""
    source = (source or "").strip()
    if not source or source.startswith("hub:"):
        return None
    stamp = 0.0
    if not source.startswith(BUILTIN_PREFIX):
        try:
            stamp = Path(source).stat().st_mtime
        except OSError:
            return None
    try:
        return _rows(source, columns or "", stamp)
    except EngineError:
        return None


def style_of(fmt: str, rows: tuple[dict[str, Any], ...]) -> str:
    """"task", "instruction", "chat" or "text" for rows of a detected format (engine/data/formats.py)."""
    if fmt == "text":
        return "text"
    if fmt == "chat":
        return "chat"
    if fmt == "preference":  # preference pairs (DPO/ORPO): the chosen answer is the one the model is taught
        answers = [" ".join(m.get("content", "") for m in r.get("chosen", [])) for r in rows]
    elif fmt == "unpaired":  # labelled answers (KTO): the ones marked good are what the model is taught
        answers = [" ".join(m.get("content", "") for m in r.get("completion", [])) for r in rows if r.get("label")]
    else:
        answers = [str(r.get("output") if fmt == "instruction" else r.get("completion") or "") for r in rows]
    words = [len(a.split()) for a in answers if a.strip()]
    return "task" if words and statistics.median(words) <= TASK_ANSWER_WORDS else "instruction"


def prompt_of(fmt: str, row: dict[str, Any]) -> str:
    """The prompt a person would type for one normalized row: the instruction (and its input), the prompt, the first
    user message, or the first words of a text."""
    if fmt == "instruction":
        text = str(row.get("instruction") or "")
        extra = str(row.get("input") or "").strip()
        text = f"{text}\n\n{extra}" if extra else text
    elif fmt == "prompt_completion":
        text = str(row.get("prompt") or "")
    elif fmt in ("chat", "preference", "unpaired"):
        turns = row.get("messages" if fmt == "chat" else "prompt", [])
        text = next((str(m.get("content") or "") for m in turns if m.get("role") == "user"), "")
    else:
        text = " ".join(str(row.get("text") or "").split()[:TEXT_EXAMPLE_WORDS])
    return text.strip()[:MAX_EXAMPLE_CHARS]


def _uploaded(source: str) -> bool:
    """A dataset that is a file handed in by a visitor (engine/views/uploads.py), not a built-in or Hub one."""
    return UPLOADS_DIRNAME in Path(str(source or "")).parts or (bool(source) and not str(source).startswith((BUILTIN_PREFIX, "hub:")))


def neutral_prompt(lang: str) -> str:
    """The example prompt of a base model, in the visitor's language."""
    return i18n.t("playground.example.base", lang)


def start_for(runs_dir: Path, ref: str | None, lang: str) -> Start:
    """What the playground shows for `ref` (see the module docstring)."""
    cfg = run_config(runs_dir, ref)
    if cfg is None and (shipped_example(ref) or {}).get("dataset") == DATES_DATASET:
        return Start(ref, DATES_PROMPT, False, "chat", "precise", "task")
    if cfg is None:
        return Start(ref, neutral_prompt(lang), True, "chat", "balanced", "base")
    if cfg.dataset.strip() == DATES_DATASET:
        return Start(ref, DATES_PROMPT, False, "chat", "precise", "task")
    # the eval data first (the mapping applies when it has the same columns, as in training: engine/data/build.py)
    if is_shared() and any(_uploaded(d) for d in (cfg.dataset, cfg.eval_dataset)):
        # an uploaded file is its visitor's own: on a shared app its rows are never shown as another page's example
        return Start(ref, neutral_prompt(lang), True, "chat", "balanced", "instruction")
    read = (data_rows(cfg.eval_dataset, cfg.columns) or data_rows(cfg.eval_dataset)) if cfg.eval_dataset else None
    read = read or data_rows(cfg.dataset, cfg.columns)
    if read is None or not read[1]:
        return Start(ref, neutral_prompt(lang), True, "chat", "balanced", "instruction")
    fmt, rows = read
    style = style_of(fmt, rows)
    example = next((p for p in (prompt_of(fmt, r) for r in rows) if p), "") or neutral_prompt(lang)
    if style == "text":
        return Start(ref, example, False, "completion", "balanced", style)
    return Start(ref, example, style != "task", "chat", "precise" if style == "task" else "balanced", style)
