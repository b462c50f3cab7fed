"""Does preference tuning raise the date task? The table of docs/preference.md ("Preference tuning that helps").

Every row starts from the same SFT run (`sft300`: the built-in compact model, 300 full fine-tuning steps on
builtin:dates, about 23% on the 100 held-out test dates) and is scored on those 100 test dates with greedy decoding,
once per seed; the table gives each seed and the median.

    python bench/preference_gain.py --runs /tmp/pref-runs                       # every config, seeds 1 2 3
    python bench/preference_gain.py --runs /tmp/pref-runs --configs dpo-mistakes-5e-5 --seeds 1
    python bench/preference_gain.py --runs /tmp/pref-runs --start sft1050 --configs sft-continued-2e-4-250 orpo-mistakes-2e-4-250

`--start sft1050` starts the rows from a longer SFT instead (sft300 trained on for 750 more steps at 2e-4: nearer the
point where more SFT stops helping), to ask whether a preference method adds anything to SFT there.

Each training is the CLI the app itself starts (`python -m engine train ...`), so a row is what a student gets from
the form with the same values. Results are appended to <runs>/preference_gain.jsonl (a config and seed already there
is not run again), and the table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SFT = ["--method", "full", "--base-model", "builtin:compact-mini", "--dataset", "builtin:dates", "--max-steps", "300", "--learning-rate", "1e-3",
       "--micro-batch-size", "16", "--max-seq-len", "72", "--seed", "1"]
# the longer start: sft300 trained on for 750 more steps (continued SFT at 2e-4, as the baseline rows)
SFT_LONG = ["--method", "full", "--base-model", "run:sft300", "--dataset", "builtin:dates", "--max-steps", "750", "--learning-rate", "2e-4",
            "--micro-batch-size", "8", "--max-seq-len", "72", "--seed", "1"]
STARTS = {"sft300": None, "sft1050": SFT_LONG}
# the rows: what each run adds to `--base-model run:START --tuning full --logging-steps 10`
DPO_MISTAKES = ["--method", "dpo", "--dataset", "builtin:date-mistakes", "--beta", "0.1", "--micro-batch-size", "8", "--max-seq-len", "72"]
CONFIGS: dict[str, list[str]] = {
    "dpo-preferences": ["--method", "dpo", "--dataset", "builtin:preferences", "--learning-rate", "1e-5", "--beta", "0.1",
                        "--micro-batch-size", "8", "--max-seq-len", "128", "--max-steps", "150"],
    "dpo-mistakes-5e-5": [*DPO_MISTAKES, "--learning-rate", "5e-5", "--max-steps", "100"],
    "dpo-mistakes-1.5e-4": [*DPO_MISTAKES, "--learning-rate", "1.5e-4", "--max-steps", "100"],
    # measured twice: before and after the fix of trl's ORPO tokenization (engine/training/preference.py PretokenizedORPOPairs)
    "orpo-mistakes-2e-4": ["--method", "orpo", "--dataset", "builtin:date-mistakes", "--beta", "0.1", "--micro-batch-size", "8", "--max-seq-len", "72",
                           "--learning-rate", "2e-4", "--max-steps", "100"],
    "orpo-mistakes-2e-4-250": ["--method", "orpo", "--dataset", "builtin:date-mistakes", "--beta", "0.1", "--micro-batch-size", "8",
                               "--max-seq-len", "72", "--learning-rate", "2e-4", "--max-steps", "250"],
    # the odds-ratio term weighted ten times more (beta 1.0): does the preference part add to the supervised part?
    "orpo-mistakes-2e-4-250-beta1": ["--method", "orpo", "--dataset", "builtin:date-mistakes", "--beta", "1.0", "--micro-batch-size", "8",
                                     "--max-seq-len", "72", "--learning-rate", "2e-4", "--max-steps", "250"],
    # the other two pair methods for as many steps: DPO at its gentler rate, KTO with each pair read as one good and one bad answer
    "dpo-mistakes-5e-5-250": [*DPO_MISTAKES, "--learning-rate", "5e-5", "--max-steps", "250"],
    "kto-mistakes-5e-5-250": ["--method", "kto", "--dataset", "builtin:date-mistakes", "--beta", "0.1", "--micro-batch-size", "8",
                              "--max-seq-len", "72", "--learning-rate", "5e-5", "--max-steps", "250"],
    # KTO on its built-in sample (the form's data for KTO) for longer than the 30 steps a loaded machine allowed before
    "kto-feedback-5e-5-150": ["--method", "kto", "--dataset", "builtin:feedback", "--beta", "0.1", "--micro-batch-size", "8",
                              "--max-seq-len", "128", "--learning-rate", "5e-5", "--max-steps", "150"],
    "kto-feedback-5e-5-30": ["--method", "kto", "--dataset", "builtin:feedback", "--beta", "0.1", "--micro-batch-size", "8",
                             "--max-seq-len", "128", "--learning-rate", "5e-5", "--max-steps", "30"],
    "kto-feedback-2e-4-30": ["--method", "kto", "--dataset", "builtin:feedback", "--beta", "0.1", "--micro-batch-size", "8",
                             "--max-seq-len", "128", "--learning-rate", "2e-4", "--max-steps", "30"],
    # GRPO (no supervised term: a gain here is the reward's alone), its form defaults for longer and at a higher rate
    "grpo-parts-1e-4-400": ["--method", "grpo", "--dataset", "builtin:dates", "--reward", "dates, date_parts", "--num-generations", "8",
                            "--max-completion-length", "16", "--micro-batch-size", "16", "--max-seq-len", "72", "--learning-rate", "1e-4",
                            "--max-steps", "400"],
    # the strongest plain baseline: the same start trained on the date task's own answers for as many steps at the same
    # learning rate and batch (ORPO's loss holds a supervised term: this row says how much of its gain that term alone gives)
    "sft-continued-2e-4": ["--method", "full", "--dataset", "builtin:dates", "--micro-batch-size", "8", "--max-seq-len", "72",
                           "--learning-rate", "2e-4", "--max-steps", "100"],
    "sft-continued-2e-4-250": ["--method", "full", "--dataset", "builtin:dates", "--micro-batch-size", "8", "--max-seq-len", "72",
                               "--learning-rate", "2e-4", "--max-steps", "250"],
}


def _env(runs: Path) -> dict[str, str]:
    return {**os.environ, "COMPACT_LAB_RUNS": str(runs), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _train(runs: Path, name: str, args: list[str]) -> float:
    """Run `python -m engine train` into <runs>/<name> (skipped when it finished before); returns the wall time."""
    if (runs / name / "model").is_dir():
        return 0.0
    started = time.time()
    with (runs / f"{name}.log").open("w") as log:
        subprocess.run([sys.executable, "-m", "engine", "train", "--run-name", name, *args], cwd=ROOT, env=_env(runs), stdout=log,
                       stderr=subprocess.STDOUT, check=True)
    return time.time() - started


def _scores(runs: Path, name: str) -> tuple[float | None, float | None]:
    """The run's date accuracy before and after training (its task_score events)."""
    before = after = None
    for line in (runs / name / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "task_score":
            if event["when"] == "before":
                before = event["accuracy"]
            elif event["when"] == "after":
                after = event["accuracy"]
    return before, after


def _pairs(runs: Path, name: str) -> dict | None:
    for line in (runs / name / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "data" and event.get("mistakes"):
            return event["mistakes"]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="runs folder (created)")
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[1, 2, 3])
    parser.add_argument("--start", default="sft300", choices=list(STARTS), help="the SFT run every row starts from")
    args = parser.parse_args()
    runs = args.runs.resolve()
    runs.mkdir(parents=True, exist_ok=True)
    seconds = _train(runs, "sft300", SFT)
    print(f"sft300: {_scores(runs, 'sft300')} ({seconds:.0f} s)", flush=True)
    if STARTS[args.start]:
        seconds = _train(runs, args.start, STARTS[args.start])
        print(f"{args.start}: {_scores(runs, args.start)} ({seconds:.0f} s)", flush=True)
    results = runs / "preference_gain.jsonl"
    done = ({(r.get("start", "sft300"), r["config"], r["seed"]) for r in map(json.loads, results.read_text().splitlines())}
            if results.exists() else set())
    for config in args.configs:
        for seed in args.seeds:
            if (args.start, config, seed) in done:
                continue
            name = f"{config}-s{seed}" if args.start == "sft300" else f"{args.start}-{config}-s{seed}"
            seconds = _train(runs, name, ["--base-model", f"run:{args.start}", "--tuning", "full", "--logging-steps", "10", "--save-steps", "1000",
                                          *CONFIGS[config], "--seed", str(seed)])
            before, after = _scores(runs, name)
            row = {"start": args.start, "config": config, "seed": seed, "before": before, "after": after, "seconds": round(seconds),
                   "pairs": _pairs(runs, name)}
            with results.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    print("\n| start | config | seeds | date accuracy after (each seed) | median | median gain |\n|---|---|---|---|---|---|")
    for start in STARTS:
        for config in CONFIGS:
            mine = sorted((r for r in rows if r["config"] == config and r.get("start", "sft300") == start), key=lambda r: r["seed"])
            if not mine:
                continue
            after = [100 * r["after"] for r in mine]
            before = statistics.median(100 * r["before"] for r in mine)
            print(f"| {start} | {config} | {', '.join(str(r['seed']) for r in mine)} | {', '.join(f'{a:.0f}%' for a in after)} | "
                  f"{statistics.median(after):.0f}% | {statistics.median(after) - before:+.0f} |")


if __name__ == "__main__":
    main()
