"""Time of a benchmark job with lm-evaluation-harness against the same scoring done by the playground's own evaluator, on the CPU.

The same 100 items of the built-in date task, the same model, greedy, 16 new tokens at most, the chat template, the same batch
size: the harness's `dates_iso` task (engine/inference/harness.py, exact match on the first line) against the Evaluate tab's
`task_accuracy` (engine/inference/evaluate.py). Also the harness's multiple-choice `dates_mc` (log-likelihood of four choices,
which the evaluator cannot do). Reported per measurement: the scoring alone (model already loaded) and, for the harness, the
whole job as the page starts it (a subprocess: Python, torch and lm_eval imports, the model load, the task files). Wall seconds
and CPU seconds (user + system, all threads): on a shared, loaded machine the CPU seconds are the steadier comparison.
Repetitions are interleaved; min and median are printed. Needs requirements-eval.txt.

    HF_HUB_OFFLINE=1 python bench/harness_vs_evaluator.py [--model builtin:compact-mini] [--reps 2] [--n 100] [--batch 16]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or 'CPU'}, {os.cpu_count()} cores"


def harness_job(runs: Path, model: str, task: str, n: int, batch: int) -> tuple[float, float, float, float, float]:
    """(whole job's wall seconds, its CPU seconds, scoring wall seconds, scoring CPU seconds, score) of `python -m engine bench` in
    a fresh folder."""
    import resource

    shutil.rmtree(runs / "_benchmarks", ignore_errors=True)
    env = {**os.environ, "COMPACT_LAB_RUNS": str(runs), "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "engine", "bench", "--model", model, "--tasks", task, "--limit", str(n), "--batch-size",
                          str(batch), "--quant", "none"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = next(json.loads(line) for line in out.stdout.splitlines() if line.startswith("{") and '"bench_result"' in line)
    return wall, cpu, result["seconds"], result["cpu_seconds"], result["value"]


def evaluator(loaded, n: int, batch: int) -> tuple[float, float, float]:
    """(scoring wall seconds, its CPU seconds, accuracy) of the playground's own evaluator on the first n items."""
    from engine.inference.evaluate import task_accuracy

    t0, c0 = time.perf_counter(), time.process_time()
    score = task_accuracy(loaded, n=n, batch_size=batch)
    return time.perf_counter() - t0, time.process_time() - c0, score.accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:compact-mini")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    from engine.config import QuantSettings
    from engine.models.loading import load_model

    runs = Path(tempfile.mkdtemp(prefix="bench-harness-"))
    t0 = time.perf_counter()
    loaded = load_model(args.model, QuantSettings(mode="none"), runs_dir=runs, allow_local_paths=True)
    load_s = time.perf_counter() - t0
    rows: dict[str, list[float]] = {}
    scores: dict[str, float] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    for _ in range(args.reps):  # interleaved
        for task in ("dates_iso", "dates_mc"):
            wall, cpu, scoring, scoring_cpu, value = harness_job(runs, args.model, task, args.n, args.batch)
            add(f"harness job {task}: wall, whole subprocess", wall)
            add(f"harness job {task}: CPU, whole subprocess", cpu)
            add(f"harness {task}: scoring wall (model loaded)", scoring)
            add(f"harness {task}: scoring CPU (model loaded)", scoring_cpu)
            scores[f"harness {task}"] = value
            if task == "dates_iso":
                seconds, cpu_s, acc = evaluator(loaded, args.n, args.batch)
                add("playground evaluator: scoring wall (same items)", seconds)
                add("playground evaluator: scoring CPU (same items)", cpu_s)
                scores["playground evaluator (exact match)"] = acc
    print(f"CPU: {_cpu()}; load average {os.getloadavg()[0]:.1f}; model {args.model}; {args.n} items; batch {args.batch}; "
          f"{args.reps} interleaved repetitions")
    print(f"model load in this process: {load_s:.1f} s\n")
    print(f"| {'measurement':50s} | min (s) | median (s) |")
    print(f"|{'-' * 52}|---------|------------|")
    for name, values in rows.items():
        print(f"| {name:50s} | {min(values):7.1f} | {statistics.median(values):10.1f} |")
    print()
    for name, value in scores.items():
        print(f"{name}: {100 * value:.1f}%")
    shutil.rmtree(runs, ignore_errors=True)


if __name__ == "__main__":
    main()
