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

import functools
import importlib.util
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..benchmarks import BASE_FOLDER, RUN_FOLDER, BenchTask, bench_tasks, model_slug, parse_task_names
from ..config import BenchConfig, MemoryQuery
from ..errors import EngineError
from ..hardware.device import DeviceInfo
from ..refs import RUN_PREFIX
from ..runs import atomic_write_text, run_path
from .tasks import date_items

if TYPE_CHECKING:  # the page reads results through this module: the model stack loads only in the job that runs it
    from ..models.loading import LoadedModel

INSTALL_COMMAND = "pip install -r requirements-eval.txt"
RESULTS = "results"  # <folder>/results/<task>.json
TASKS = "tasks"  # <folder>/tasks/: the local tasks' YAML and data, written at run time
BOOTSTRAP_ITERS = 1000  # the harness's bootstrap for metrics without a closed-form standard error (its default 100,000 takes minutes)
PROGRESS_EVERY_S = 1.0

Emit = Callable[..., None]  # emit(event_type, **fields): the job's event log


def harness_missing() -> bool:
    """Whether lm-evaluation-harness is not installed (nothing is imported to find out)."""
    try:
        return importlib.util.find_spec("lm_eval") is None
    except ValueError:  # a module entry without a spec (blocked in sys.modules): not importable
        return True


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
        # stored with "/" (the templates put the "-" back): `datasets` reads an ISO date string in JSON as a timestamp, and the
        # harness would then compare against "2018-01-02 00:00:00"
        mc_rows.append({"question": question, "choices": [c.replace("-", "/") for c in choices], "answer": choices.index(item["output"])})
        gen_rows.append({"question": question, "answer": item["output"].replace("-", "/")})
    for name, rows in (("dates_mc", mc_rows), ("dates_iso", gen_rows)):
        atomic_write_text(folder / f"{name}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    common = {"dataset_path": "json", "test_split": "test", "doc_to_text": "{{question}}", "metadata": {"version": 1.0}}
    mc = {"task": "dates_mc", **common, "dataset_kwargs": {"data_files": {"test": str(folder / "dates_mc.jsonl")}},
          "output_type": "multiple_choice", "doc_to_choice": "{{choices | map('replace', '/', '-') | list}}", "doc_to_target": "{{answer}}",
          "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}
    # The playground's evaluator: greedy, up to 16 new tokens, the first line compared after stripping spaces and punctuation
    gen = {"task": "dates_iso", **common, "dataset_kwargs": {"data_files": {"test": str(folder / "dates_iso.jsonl")}},
           "output_type": "generate_until", "doc_to_target": "{{answer.replace('/', '-')}}",
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


def summarize_result(raw: dict[str, Any], task: BenchTask, *, ref: str, mode: str, limit: int, seconds: float,
                     cpu_seconds: float | None = None) -> dict[str, Any]:
    """What we keep of simple_evaluate's output for one task (a group such as global_mmlu_pt: its aggregate)."""
    scores = (raw.get("groups") or {}).get(task.name) or (raw.get("results") or {}).get(task.name) or {}
    metric, value, stderr = pick_metric(scores, task.metric)
    n_samples = (raw.get("n-samples") or {}).get(task.name) or {}
    n = n_samples.get("effective") or sum((v or {}).get("effective", 0) for v in (raw.get("n-samples") or {}).values())
    return {"task": task.name, "model": ref, "mode": mode, "limit": limit, "metric": metric, "value": value, "stderr": stderr, "n": int(n or 0),
            "seconds": round(seconds, 2), "cpu_seconds": None if cpu_seconds is None else round(cpu_seconds, 2), "time": round(time.time(), 3), "harness": _harness_version(),
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


def run_tasks(loaded: LoadedModel | None, names: list[str], *, ref: str, mode: str, limit: int, batch_size: int, folder: Path,
              emit: Emit) -> dict[str, dict]:
    """Score `loaded` on each task of `names` (curated names, engine/benchmarks.py) with at most `limit` rows each, writing
    <folder>/results/<task>.json as each task finishes; a task already there for the same model and limit is skipped (a
    restarted job continues). emit(type, **fields): bench_task (a task starts), bench_progress, bench_result, bench_skip.
    Returns {task: result} of every task of `names`."""
    catalog = bench_tasks()
    tasks = [catalog[n] for n in names]
    out: dict[str, dict] = {}
    todo = []
    for task in tasks:
        if _done(folder, task.name, ref, mode, limit):
            out[task.name] = read_results(folder)[task.name]
            emit("bench_skip", task=task.name, value=out[task.name].get("value"))
        else:
            todo.append(task)
    if not todo or loaded is None:
        return out
    require_harness()
    import lm_eval
    from lm_eval.tasks import TaskManager

    local = write_local_tasks(Path(folder) / TASKS)
    # the package's ~10,000 task files are indexed only when a standard task is asked for (seconds on a slow disk)
    manager = TaskManager(include_path=str(local), include_defaults=any(not t.local for t in todo))
    lm = _lm(loaded, batch_size, emit)
    for i, task in enumerate(todo):
        emit("bench_task", task=task.name, index=i, count=len(todo), limit=limit)
        lm.task, t0, c0 = task.name, time.time(), time.process_time()
        raw = lm_eval.simple_evaluate(model=lm, tasks=[task.name], limit=limit, task_manager=manager, apply_chat_template=task.chat,
                                      log_samples=False, bootstrap_iters=BOOTSTRAP_ITERS, verbosity="WARNING")
        result = summarize_result(raw or {}, task, ref=ref, mode=mode, limit=limit, seconds=time.time() - t0,
                                  cpu_seconds=time.process_time() - c0)
        atomic_write_text(result_path(folder, task.name), json.dumps(result, indent=2) + "\n")
        out[task.name] = result
        emit("bench_result", **{k: result[k] for k in ("task", "metric", "value", "stderr", "n", "seconds", "cpu_seconds")})
    return out


# --------------------------------------------------------------------------------------------------
# The job: where results go, the precision that fits, the base then the run
# --------------------------------------------------------------------------------------------------

FIT_SHARE = 0.9  # of the card (or RAM) a job may plan to use: the rest is the allocator's and the app's
SEQ_LEN = 1024  # tokens of one benchmark row the estimate plans for (a few-shot prompt and its longest choice)


@dataclass(frozen=True)
class BenchPlan:
    """How a benchmark job loads its model: the precision (`mode`), the estimator's GiB for it and the room it has."""

    mode: str  # QuantSettings.mode: none | 8bit | 4bit
    base: str | None  # a run's base model (scored too, in the same precision, for before/after); None for a model
    need_gib: float | None  # the estimator's inference total; None when it does not know the model (the load decides)
    room_gib: float
    device: str  # the card's (or the CPU's) name


def bench_folder(runs_dir: Path, ref: str, mode: str) -> Path:
    """Where the results of `ref` in precision `mode` are kept (engine/benchmarks.py): a run's own `benchmarks/`, else a folder
    per model and precision under <runs>/_benchmarks/."""
    if ref.startswith(RUN_PREFIX) and "/" not in ref[len(RUN_PREFIX):]:
        return run_path(runs_dir, ref[len(RUN_PREFIX):]) / RUN_FOLDER
    return Path(runs_dir) / BASE_FOLDER / model_slug(ref, mode)


def plan_bench(cfg: BenchConfig, runs_dir: Path, device: DeviceInfo | None = None) -> BenchPlan:
    """The precision a job loads `cfg.model` in, sized by the memory estimator (inference at `cfg.batch_size` x SEQ_LEN): the
    asked one, or with `auto` the run's own (a QLoRA run's 4-bit base) and then 8-bit and 4-bit while it does not fit.
    EngineError naming the estimate and the card when nothing fits."""
    from ..estimator.memory import estimate
    from ..hardware.device import detect_device, dtype_name, resolve_dtype
    from ..models.references import architecture_ref, read_run_base
    from ..refs import run_ref_dir

    device = device or detect_device()
    base, own = None, None
    if cfg.model.startswith(RUN_PREFIX):
        base, own = read_run_base(run_ref_dir(cfg.model[len(RUN_PREFIX):].split("/")[0], runs_dir))
    first = own.mode if own is not None else "none"
    modes = [cfg.quant] if cfg.quant != "auto" else list(dict.fromkeys([first, "8bit", "4bit"]))
    need = None
    for mode in modes:
        try:
            arch = architecture_ref(cfg.model, runs_dir)
            wp = {"4bit": "nf4", "8bit": "int8"}.get(mode) or dtype_name(resolve_dtype("auto", device))
            need = estimate(MemoryQuery(model=arch, task="inference", weight_precision=wp, batch=cfg.batch_size, seq_len=SEQ_LEN,
                                        new_tokens=0)).total_gib
        except EngineError:
            return BenchPlan(mode, base, None, device.total_gib, device.name)  # the estimator does not know it: the load decides
        if need <= FIT_SHARE * device.total_gib:
            return BenchPlan(mode, base, round(need, 2), device.total_gib, device.name)
    raise EngineError(key="bench.error.too_big", model=cfg.model, need=round(need or 0.0, 1), card=device.name,
                      room=round(device.total_gib, 1), modes=", ".join(modes))


def run_bench(cfg: BenchConfig, runs_dir: Path, plan: BenchPlan, emit: Emit) -> dict[str, dict[str, dict]]:
    """The whole job: with `cfg.with_base` a run's base first (its results shared by every run of that base), then the model.
    Each side is loaded by our own loader (adapter applied, `plan.mode`) and freed before the next. emit() gets `side`
    ("base" | "model") on every event. Returns {"base": {task: result}, "model": {...}}."""
    import gc

    from ..config import QuantSettings
    from ..models.loading import load_model

    names = parse_task_names(cfg.tasks)
    sides = [("base", plan.base)] if (cfg.with_base and plan.base) else []
    out: dict[str, dict[str, dict]] = {}
    for side, ref in [*sides, ("model", cfg.model)]:
        folder = bench_folder(runs_dir, ref, plan.mode)
        tagged: Emit = functools.partial(emit, side=side, ref=ref)
        if all(_done(folder, n, ref, plan.mode, cfg.limit) for n in names):  # nothing to do: no load at all
            out[side] = run_tasks(None, names, ref=ref, mode=plan.mode, limit=cfg.limit, batch_size=cfg.batch_size, folder=folder,
                                  emit=tagged)
            continue
        tagged("bench_load", mode=plan.mode)
        loaded = load_model(ref, QuantSettings(mode=plan.mode), runs_dir=runs_dir, allow_local_paths=True, allow_cpu_repack=True)
        try:
            out[side] = run_tasks(loaded, names, ref=ref, mode=plan.mode, limit=cfg.limit, batch_size=cfg.batch_size, folder=folder,
                                  emit=tagged)
        finally:
            del loaded
            gc.collect()
    return out


def _done(folder: Path, task: str, ref: str, mode: str, limit: int) -> bool:
    """Is `task` already scored in `folder` for this model, precision and limit? (A restarted job skips it.)"""
    old = read_results(folder).get(task)
    return bool(old) and (old.get("model"), old.get("mode"), old.get("limit")) == (ref, mode, limit) and old.get("value") is not None
