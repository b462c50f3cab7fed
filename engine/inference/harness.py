"""Benchmarks with the field's own harness: lm-evaluation-harness (`lm_eval`, requirements-eval.txt) scoring a model that our
own loader loaded (engine/models/loading.py: a run's adapter applied, 4-bit/8-bit as asked), one task at a time.

Why the harness and not our evaluator: its tasks (ARC, HellaSwag, Belebele, Global-MMLU in Portuguese...) and its scoring
(log-likelihood of each choice, the standard error it reports) are what papers and leaderboards quote, so a student's
before/after numbers mean what the field's numbers mean. We add what it lacks for a student: the model loaded the way the
run was trained, tasks built from the project's data so the whole path runs offline (`write_local_tasks`), a result file
per task written as soon as the task finishes (a stopped job restarts where it was), and progress as events.

- `harness_missing()` / `require_harness()`: the optional package, said before the click (the page) or at the start (CLI).
- `write_local_tasks(folder)`: the date task as the harness's own YAML task format over JSON-lines files (`dataset_path:
  json`): `dates_mc` (pick the ISO date among four, by log-likelihood) and `dates_iso` (write it: exact match on the first
  line, the scoring of the playground's own evaluator, engine/inference/tasks.py).
- `run_tasks(loaded, names, ...)`: simple_evaluate per task with an `HFLM` around the loaded model; returns the results.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..benchmarks import BenchTask, bench_tasks
from ..errors import EngineError
from ..models.loading import LoadedModel
from ..runs import atomic_write_text
from .tasks import date_items

INSTALL_COMMAND = "pip install -r requirements-eval.txt"
RESULTS = "results"  # <folder>/results/<task>.json
TASKS = "tasks"  # <folder>/tasks/: the local tasks' YAML and data, written at run time
BOOTSTRAP_ITERS = 1000  # the harness's bootstrap for metrics without a closed-form standard error (its default 100,000 takes minutes)
PROGRESS_EVERY_S = 1.0

Emit = Callable[..., None]  # emit(event_type, **fields): the job's event log


def harness_missing() -> bool:
    """Whether lm-evaluation-harness is not installed (nothing is imported to find out)."""
    return importlib.util.find_spec("lm_eval") is None


def require_harness() -> None:
    """EngineError naming the install command when lm-evaluation-harness is missing."""
    if harness_missing():
        raise EngineError(key="bench.error.missing", command=INSTALL_COMMAND)


# --------------------------------------------------------------------------------------------------
# The local tasks: the date task in the harness's own format
# --------------------------------------------------------------------------------------------------

def _wrong_dates(iso: str, rng: random.Random) -> list[str]:
    """Three wrong answers a model that half-learned the task would give: day and month swapped, the input's own order
    (DD-MM-YYYY), a year off by one (another wrong one when the day equals the month)."""
    y, m, d = iso.split("-")
    out = [f"{d}-{m}-{y}", f"{int(y) + rng.choice((-1, 1)):04d}-{m}-{d}"]
    swapped = f"{y}-{d}-{m}"
    out.append(swapped if swapped != iso else f"{y}-{m}-{int(d) % 28 + 1:02d}")
    return out


def write_local_tasks(folder: Path) -> Path:
    """Write the local tasks (`dates_mc`, `dates_iso`: YAML + JSON lines, the built-in date task's 100 test items) under
    `folder` and return it (the TaskManager's include_path). Deterministic: the same files every time."""
    folder = Path(folder)
    items = date_items("test")
    rng = random.Random(34)
    mc_rows, gen_rows = [], []
    for item in items:
        question = item["instruction"]
        choices = [item["output"], *_wrong_dates(item["output"], rng)]
        rng.shuffle(choices)
        mc_rows.append({"question": question, "choices": choices, "answer": choices.index(item["output"])})
        gen_rows.append({"question": question, "answer": item["output"]})
    for name, rows in (("dates_mc", mc_rows), ("dates_iso", gen_rows)):
        atomic_write_text(folder / f"{name}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    common = {"dataset_path": "json", "test_split": "test", "doc_to_text": "{{question}}", "metadata": {"version": 1.0}}
    mc = {"task": "dates_mc", **common, "dataset_kwargs": {"data_files": {"test": str(folder / "dates_mc.jsonl")}},
          "output_type": "multiple_choice", "doc_to_choice": "{{choices}}", "doc_to_target": "{{answer}}",
          "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}
    # The playground's evaluator: greedy, up to 16 new tokens, the first line compared after stripping spaces and punctuation
    gen = {"task": "dates_iso", **common, "dataset_kwargs": {"data_files": {"test": str(folder / "dates_iso.jsonl")}},
           "output_type": "generate_until", "doc_to_target": "{{answer}}",
           "generation_kwargs": {"until": ["\n"], "do_sample": False, "max_gen_toks": 16},
           "filter_list": [{"name": "first_line", "filter": [{"function": "regex", "regex_pattern": r"(\d{4}-\d{2}-\d{2})"},
                                                             {"function": "take_first"}]}],
           "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True, "ignore_case": True,
                            "ignore_punctuation": False}]}
    import yaml

    for task in (mc, gen):
        atomic_write_text(folder / f"{task['task']}.yaml", yaml.safe_dump(task, sort_keys=False, allow_unicode=True))
    return folder


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------

def result_path(folder: Path, task: str) -> Path:
    """Where a finished task's result is kept: <folder>/results/<task>.json."""
    return Path(folder) / RESULTS / f"{task}.json"


def read_results(folder: Path) -> dict[str, dict[str, Any]]:
    """Every finished task's result in `folder` (a damaged file is skipped: it is written again by the next job)."""
    out = {}
    for path in sorted((Path(folder) / RESULTS).glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(float(value)) else None


def pick_metric(scores: dict[str, Any], preferred: str) -> tuple[str, float | None, float | None]:
    """(metric, value, standard error) from the harness's result of one task ({"acc,none": .., "acc_stderr,none": ..}): the
    preset's metric when present, else the first of acc / exact_match / any number."""
    keys = [k for k in scores if "," in k and "_stderr" not in k and _finite(scores[k]) is not None]
    for want in (preferred, "acc", "exact_match"):
        for key in keys:
            if key.split(",")[0] == want:
                metric, filt = key.split(",", 1)
                return metric, _finite(scores[key]), _finite(scores.get(f"{metric}_stderr,{filt}"))
    if keys:
        metric, filt = keys[0].split(",", 1)
        return metric, _finite(scores[keys[0]]), _finite(scores.get(f"{metric}_stderr,{filt}"))
    return preferred, None, None


def summarize_result(raw: dict[str, Any], task: BenchTask, *, ref: str, limit: int, seconds: float) -> dict[str, Any]:
    """What we keep of simple_evaluate's output for one task (a group such as global_mmlu_pt: its aggregate)."""
    scores = (raw.get("groups") or {}).get(task.name) or (raw.get("results") or {}).get(task.name) or {}
    metric, value, stderr = pick_metric(scores, task.metric)
    n_samples = (raw.get("n-samples") or {}).get(task.name) or {}
    n = n_samples.get("effective") or sum((v or {}).get("effective", 0) for v in (raw.get("n-samples") or {}).values())
    return {"task": task.name, "model": ref, "limit": limit, "metric": metric, "value": value, "stderr": stderr, "n": int(n or 0),
            "seconds": round(seconds, 2), "time": round(time.time(), 3), "harness": _harness_version(),
            "metrics": {k: v for k, v in scores.items() if "," in k and _finite(v) is not None}}


def _harness_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lm_eval")
    except PackageNotFoundError:
        return ""


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------

def _lm(loaded: LoadedModel, batch_size: int, emit: Emit) -> Any:
    """An HFLM around the loaded model and tokenizer that reports its progress (rows scored or generated) as events."""
    from lm_eval.models.huggingface import HFLM

    class ProgressLM(HFLM):
        """HFLM counting the rows each forward pass or generation handles (the harness's own tqdm goes to the log only)."""

        task, done, total, last = "", 0, 0, 0.0

        def _begin(self, requests: list) -> None:
            self.done, self.total = 0, len(requests)

        def _tick(self, rows: int) -> None:
            self.done += rows
            if time.time() - self.last >= PROGRESS_EVERY_S:
                self.last = time.time()
                emit("bench_progress", task=self.task, done=min(self.done, self.total), total=self.total)

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            self._begin(requests)
            return super().loglikelihood(requests, disable_tqdm=disable_tqdm)

        def generate_until(self, requests, disable_tqdm: bool = False):
            self._begin(requests)
            return super().generate_until(requests, disable_tqdm=disable_tqdm)

        def _model_call(self, inps, attn_mask=None, labels=None):
            out = super()._model_call(inps, attn_mask=attn_mask, labels=labels)
            self._tick(int(inps.shape[0]))
            return out

        def _model_generate(self, context, max_length, stop, **generation_kwargs):
            out = super()._model_generate(context, max_length, stop, **generation_kwargs)
            self._tick(int(context.shape[0]))
            return out

    return ProgressLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, backend="causal", batch_size=batch_size,
                      max_length=loaded.context_length)


def run_tasks(loaded: LoadedModel, names: list[str], *, ref: str, limit: int, batch_size: int, folder: Path, emit: Emit) -> dict[str, dict]:
    """Score `loaded` on each task of `names` (curated names, engine/benchmarks.py) with at most `limit` rows each, writing
    <folder>/results/<task>.json as each task finishes; a task already there for the same model and limit is skipped (a
    restarted job continues). emit(type, **fields): bench_task (a task starts), bench_progress, bench_result, bench_skip.
    Returns {task: result} of every task of `names`."""
    require_harness()
    import lm_eval
    from lm_eval.tasks import TaskManager

    catalog = bench_tasks()
    tasks = [catalog[n] for n in names]
    out: dict[str, dict] = {}
    todo = []
    for task in tasks:
        old = read_results(folder).get(task.name)
        if old and old.get("limit") == limit and old.get("model") == ref and old.get("value") is not None:
            out[task.name] = old
            emit("bench_skip", task=task.name, value=old.get("value"))
        else:
            todo.append(task)
    if not todo:
        return out
    local = write_local_tasks(Path(folder) / TASKS)
    # the package's ~10,000 task files are indexed only when a standard task is asked for (seconds on a slow disk)
    manager = TaskManager(include_path=str(local), include_defaults=any(not t.local for t in todo))
    lm = _lm(loaded, batch_size, emit)
    for i, task in enumerate(todo):
        emit("bench_task", task=task.name, index=i, count=len(todo), limit=limit)
        lm.task, t0 = task.name, time.time()
        raw = lm_eval.simple_evaluate(model=lm, tasks=[task.name], limit=limit, task_manager=manager, apply_chat_template=task.chat,
                                      log_samples=False, bootstrap_iters=BOOTSTRAP_ITERS, verbosity="WARNING")
        result = summarize_result(raw or {}, task, ref=ref, limit=limit, seconds=time.time() - t0)
        atomic_write_text(result_path(folder, task.name), json.dumps(result, indent=2) + "\n")
        out[task.name] = result
        emit("bench_result", **{k: result[k] for k in ("task", "metric", "value", "stderr", "n", "seconds")})
    return out
