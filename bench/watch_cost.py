"""What watching a run in the browser costs the training, on the machine that trains (`python app.py` on a laptop).

Not a test: it needs Chromium and Playwright (the browser tests' set-up). It starts the app on an empty runs folder,
opens it in headless Chromium, presses Start on the Fine-tune panel's defaults (the first run: the shipped compact model
on the date task) and waits for the run to finish, in turns:

  unwatched   Start, then the page is closed: the server and the training only (the best a browser can do)
  watched     the page stays on the Fine-tune panel, refreshing the progress, the plot and the log
  watched@REF the same with the app of an earlier commit (--baseline-ref, e.g. the commit before a change to the
              refresh), from a temporary `git worktree` of it, in the same run and the same environment

and prints a markdown table: seconds a training step (median over rounds, from the run's own progress events), wall
seconds from Start to the saved model, and CPU seconds of the training process, the app's server and the browser.

    python bench/watch_cost.py [--rounds 2] [--baseline-ref COMMIT] [--modes unwatched,watched]

On a 2-core machine the numbers move 10-20% between rounds with whatever else runs: compare rows of one run only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) used so far by the training processes, the app's server and Chromium (Linux /proc)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = "train" if "engine train" in cmd else "server" if "app.py" in cmd else "browser" if "chrom" in cmd else None
        if kind:
            out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(app_dir: Path, runs: Path):
    """`python app.py` from app_dir on a free port, until the block ends."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), "--runs-dir", str(runs)], cwd=app_dir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def one_round(browser, url: str, runs: Path, watched: bool) -> dict[str, float]:
    """Start the default run from the page and wait for its saved model: s/step, wall and CPU seconds."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(url)
    page.locator("#guide-finetune").click()
    page.locator("#finetune-start").wait_for(state="visible")
    page.wait_for_timeout(2000)  # the page's own start-up work is not the training's
    before, started = cpu_seconds(), time.monotonic()
    page.locator("#finetune-start").click()
    while not glob.glob(str(runs / "*" / "events.jsonl")):
        time.sleep(0.2)
    if not watched:
        page.close()
    while not glob.glob(str(runs / "*" / "model")) and not glob.glob(str(runs / "*" / "adapter")):
        if time.monotonic() - started > 1800:
            raise SystemExit("the run did not finish in 30 minutes")
        time.sleep(0.5)
    wall, after = time.monotonic() - started, cpu_seconds()
    if watched:
        page.close()
    events = [json.loads(line) for line in open(glob.glob(str(runs / "*" / "events.jsonl"))[0], encoding="utf-8")]
    progress = [e for e in events if e.get("type") == "progress"]
    first, last = progress[1], progress[-1]  # from the second event: the first step carries the warm-up
    row = {"s_per_step": (last["time"] - first["time"]) / (last["step"] - first["step"]), "wall": wall}
    row.update({k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("train", "server", "browser")})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="unwatched,watched")
    ap.add_argument("--baseline-ref", default=None, help="also time 'watched' with the app of this commit")
    args = ap.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit("needs Playwright (pip install playwright) and Chromium (apt-get install chromium)") from None
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Chromium (apt-get install chromium)")

    work = Path(tempfile.mkdtemp(prefix="watch-cost-"))
    apps = {mode: ROOT for mode in args.modes.split(",")}
    if args.baseline_ref:
        old = work / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old), args.baseline_ref], cwd=ROOT, check=True)
        apps[f"watched@{args.baseline_ref[:7]}"] = old
    rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in apps}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=FLAGS)
            for r in range(args.rounds):
                for mode, app_dir in apps.items():  # in turns, so a slow moment of the machine spreads over all modes
                    runs = work / f"runs-{r}-{mode.replace('@', '-')}"
                    with running_app(app_dir, runs) as url:
                        row = one_round(browser, url, runs, watched=mode != "unwatched")
                    rows[mode].append(row)
                    print(f"round {r + 1} {mode}: {row['s_per_step']:.3f} s/step, {row['wall']:.0f} s", file=sys.stderr)
            browser.close()
    finally:
        if args.baseline_ref:
            subprocess.run(["git", "worktree", "remove", "--force", str(work / "baseline")], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)

    base = statistics.median(r["s_per_step"] for r in rows[next(iter(rows))])
    print(f"\n{os.cpu_count()} CPU cores, {args.rounds} round(s), the Fine-tune form's defaults (medians)\n")
    print("| mode | s/step | vs first row | Start → model, s | CPU s: training | server | browser |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        # a closed page's renderer process exits and takes its CPU count with it: nothing to show for "unwatched"
        browser = "–" if mode == "unwatched" else f"{med['browser']:.1f}"
        print(f"| {mode} | {med['s_per_step']:.3f} | {med['s_per_step'] / base:.2f}x | {med['wall']:.0f} | {med['train']:.0f} | "
              f"{med['server']:.1f} | {browser} |")


if __name__ == "__main__":
    main()
