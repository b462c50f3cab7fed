"""Start-up time: the app until it serves its page, and `python -m engine estimate`, against the import floor.

Not a test: it prints a table with min/median over interleaved repetitions and PASS/FAIL against the targets of
the benchmark issue:

    app start (python app.py until its URL answers)       <= 1.15x the import floor
    python -m engine estimate (catalog or built-in model)  < 1 s, without importing torch or transformers

    python bench/startup.py [--repeats 5]

The floor is what any Gradio app over transformers pays: a fresh `python -c "import gradio, torch, transformers"`.
The app is started exactly as the README does (`python app.py`, on a free port, a temporary runs folder) and timed
until its page answers HTTP 200; the estimate is a fresh `python -m engine estimate --model M --json`. Each command
runs in a fresh process, the commands interleaved and their order rotated each repetition.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_APP, TARGET_ESTIMATE_S = 1.15, 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}


def time_command(args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return elapsed


def time_app(timeout_s: float = 180.0) -> float:
    """Seconds from `python app.py` until its page answers."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), "--runs-dir", runs], cwd=ROOT, env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while time.perf_counter() - start < timeout_s:
                if proc.poll() is not None:
                    raise SystemExit(f"app.py exited with {proc.returncode} before serving")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as resp:
                        if resp.status == 200:
                            return time.perf_counter() - start
                except OSError:
                    time.sleep(0.05)
            raise SystemExit(f"app.py did not serve within {timeout_s:.0f} s")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    commands = {
        "import floor (gradio + torch + transformers)": lambda: time_command([py, "-c", "import gradio, torch, transformers"]),
        "python app.py until the page answers": time_app,
        "estimate builtin:compact-mini": lambda: time_command([py, "-m", "engine", "estimate", "--model", "builtin:compact-mini", "--json"]),
        "estimate llama-3.2-1b (catalog)": lambda: time_command([py, "-m", "engine", "estimate", "--model", "llama-3.2-1b", "--task", "qlora", "--json"]),
        "import torch alone (for reference)": lambda: time_command([py, "-c", "import torch"]),
    }
    names = list(commands)
    times: dict[str, list[float]] = {n: [] for n in names}
    time_command([py, "-c", "import gradio, torch, transformers"])  # warm the OS file cache once, for every command alike
    for i in range(args.repeats):
        for name in names[i % len(names):] + names[: i % len(names)]:
            times[name].append(commands[name]())
            print(f"run {i + 1}/{args.repeats}: {name}: {times[name][-1]:.2f} s", flush=True)
    print()
    print(f"| command | min s | median s | ({args.repeats} fresh processes each, interleaved) |")
    print("|---|---|---|---|")
    for name in names:
        print(f"| {name} | {min(times[name]):.2f} | {statistics.median(times[name]):.2f} | |")
    floor = statistics.median(times[names[0]])
    app = statistics.median(times[names[1]])
    est = max(statistics.median(times[names[2]]), statistics.median(times[names[3]]))
    checks = [
        (f"app start {app:.2f} s = {app / floor:.2f}x the import floor {floor:.2f} s (target <= {TARGET_APP}x)", app <= TARGET_APP * floor),
        (f"estimate {est:.2f} s (target < {TARGET_ESTIMATE_S:.0f} s; no torch import: tests/estimator/test_arch_cache.py)", est < TARGET_ESTIMATE_S),
    ]
    print()
    for text, ok in checks:
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
    sys.exit(0 if all(ok for _, ok in checks) else 1)


if __name__ == "__main__":
    main()
