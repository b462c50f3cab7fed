"""Every GPU check in one call, within a time budget: the command the GPU kit runs on a lent GPU machine.

    python -m bench.gpu_kit.check --out DIR [--budget-s 420] [--only env,t4] [--dry-run]

The sections run in order of value, each in its own process (a crash or a hung kernel ends that section only) with a
share of the budget (`CAP_S`; time a section leaves unused goes to the later ones):

  a. env         torch, CUDA, driver, card; bitsandbytes' CUDA self-test; the app's start-up lines; the versions found
  b. gpu_tests   `pytest -m gpu` (QLoRA on CUDA, the precision policy on the card, fp16 AMP: loss scale and scaler.pt)
  c. t4          T4 conditions on this card (COMPACT_LAB_EMULATE_T4=1): precision decisions, the memory cap, QLoRA and
                 8-bit LoRA of the Llama-3.2-1B shape (stop, resume, merge, generate, predicted vs measured peak), OOM
  d. grid        the estimator grid: method x micro-batch x sequence x checkpointing, 1B and 3B shapes, as calibration rows
  e. throughput  the default recipe vs the library recipe on the 1B shape (tokens/s, MFU, peak), Liger and the chunked loss
  f. playground  generation at 16/8/4 bits: time to first token and tokens/s

Each section writes DIR/<section>.json as each of its parts ends, and DIR/summary.md is rewritten after every section, so
a timeout keeps what finished; a failure never stops the next section. At most 8 files land in DIR (the device tool brings
back 8): the six JSON files, summary.md and grid.csv.

`--dry-run`: the same orchestration on the CPU with tiny shapes (CUDA hidden from every section); the sections that need
CUDA are reported as skipped with the reason. tests/test_gpu_kit.py runs it in CI, so the kit cannot rot between two lent
GPUs. The exit status is 0 when every section finished or was skipped for want of CUDA, 1 otherwise (a failure, a
timeout, or a section not started because the budget was spent).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import ROOT, Context, read_json, write_json

SECTIONS = ("env", "gpu_tests", "t4", "grid", "throughput", "playground")
MODULES = {"env": "env_check", "gpu_tests": "gpu_tests", "t4": "t4_run", "grid": "grid", "throughput": "throughput",
           "playground": "playground"}
MIN_START_S = 10.0  # a section is not started with less time than this left
DELAY_ENV = "COMPACT_LAB_KIT_DELAY_S"  # tests only: each section sleeps this long first (a section that outlives its share)


def section_module(name: str) -> Any:
    return importlib.import_module(f"bench.gpu_kit.{MODULES[name]}")


def run_section(name: str, out: Path, deadline: float, dry_run: bool, work: Path) -> int:
    """In the section's own process: run it and write its JSON (status ok, or failed with the error)."""
    module = section_module(name)
    ctx = Context(name, out, deadline, dry_run, work)
    ctx.result.update(section=name, title=module.TITLE, status="running", started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    ctx.write()
    t0 = time.time()
    try:
        time.sleep(float(os.environ.get(DELAY_ENV) or 0))
        module.run(ctx)
        ctx.result["status"] = "ok" if not _failed_parts(ctx.result) else "partial"
    except Exception as exc:  # reported in the JSON; the orchestrator goes on with the next section
        import traceback

        ctx.result.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:2000], traceback=traceback.format_exc()[-4000:])
    ctx.result["seconds"] = round(time.time() - t0, 1)
    ctx.write()
    return 0 if ctx.result["status"] in ("ok", "partial") else 1


def _failed_parts(result: dict[str, Any]) -> list[str]:
    return [k for k, v in result.items() if isinstance(v, dict) and v.get("status") == "failed"]


def _cuda_available() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    import torch

    return torch.cuda.is_available()


def orchestrate(out: Path, budget_s: float, sections: list[str], dry_run: bool, work: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + budget_s
    cuda = (not dry_run) and _cuda_available()
    results: dict[str, dict[str, Any]] = {}
    planned = start  # each section may run until the sum of the caps so far: what one leaves unused goes to the next
    scale = budget_s / sum(section_module(n).CAP_S for n in sections)  # the caps are shares of the budget
    for name in sections:
        module = section_module(name)
        planned += module.CAP_S * scale
        path = out / f"{name}.json"
        left = deadline - time.time()
        if getattr(module, "NEEDS_CUDA", False) and not cuda:
            reason = "needs CUDA: " + ("the dry run hides it (CPU, tiny shapes)" if dry_run else "no CUDA GPU here")
            results[name] = {"section": name, "title": module.TITLE, "status": "skipped", "reason": reason}
            write_json(path, results[name])
        elif left < MIN_START_S:
            reason = f"the budget is spent ({left:.0f} s left of {budget_s:.0f})"
            results[name] = {"section": name, "title": module.TITLE, "status": "not started", "reason": reason}
            write_json(path, results[name])
        else:
            results[name] = _spawn(name, out, min(planned - time.time(), left), deadline, dry_run, work)
        print(f"[{time.time() - start:5.0f} s] {name}: {results[name]['status']}"
              + (f" ({results[name].get('reason') or results[name].get('error', '')})" if results[name]["status"] != "ok" else ""), flush=True)
        write_summary(out, results, budget_s, time.time() - start, dry_run)
    ok = all(r["status"] in ("ok", "skipped") for r in results.values())
    print((out / "summary.md").read_text(encoding="utf-8"))
    return 0 if ok else 1


def _spawn(name: str, out: Path, share_s: float, deadline: float, dry_run: bool, work: Path) -> dict[str, Any]:
    """The section in its own process group, killed at its share of the budget; its JSON as it stands then."""
    own_deadline = min(deadline, time.time() + share_s)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p)
    if dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "bench.gpu_kit.check", "--section", name, "--out", str(out), "--deadline", str(own_deadline),
           "--work", str(work)] + (["--dry-run"] if dry_run else [])
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timed_out = False
    try:
        log, _ = proc.communicate(timeout=max(1.0, own_deadline - time.time()))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the section and every process it started (engine runs, pytest)
        log, _ = proc.communicate()
    result = read_json(out / f"{name}.json") or {"section": name, "title": section_module(name).TITLE}
    result["seconds"] = round(time.time() - t0, 1)
    result["budget_s"] = round(share_s, 1)
    if timed_out:
        result["status"] = "timeout"
        result["reason"] = f"killed at its share of the budget ({share_s:.0f} s); the parts above finished"
    elif proc.returncode != 0 and result.get("status") in (None, "running", "ok"):
        result["status"] = "failed"
        result["error"] = f"exit status {proc.returncode}"
    result["log_tail"] = (log or "")[-3000:]
    write_json(out / f"{name}.json", result)
    return result


def write_summary(out: Path, results: dict[str, dict[str, Any]], budget_s: float, elapsed: float, dry_run: bool) -> None:
    env = read_json(out / "env.json")
    lines = ["# GPU check" + (" (dry run: CPU, tiny shapes)" if dry_run else ""), "",
             f"{env.get('card', {}).get('name', 'no CUDA card')}; torch {env.get('torch', {}).get('version', '?')}; "
             f"{elapsed:.0f} s of a {budget_s:.0f} s budget.", "",
             "| section | status | seconds | note |", "|---|---|---|---|"]
    for name, r in results.items():
        note = r.get("reason") or r.get("error") or ", ".join(f"{k} failed" for k in _failed_parts(r))
        lines.append(f"| {name}: {r.get('title', '')} | {r['status']} | {r.get('seconds', '')} | {str(note)[:160].replace('|', '/')} |")
    for name, r in results.items():
        if r["status"] in ("skipped", "not started"):
            continue
        try:
            body = section_module(name).summary(r)
        except Exception as exc:  # a summary that cannot be written must not lose the others
            body = [f"(summary failed: {type(exc).__name__}: {exc})"]
        if body:
            lines += ["", f"## {name}: {r.get('title', '')}", "", *body]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the results folder (the device tool's $OUT)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="the whole run's time budget in seconds (each section gets its CAP_S share of it)")
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections, in this order: " + ", ".join(SECTIONS))
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes; the sections that need CUDA are skipped")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu_kit_work"), help="models and runs (not under --out)")
    ap.add_argument("--section", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.section:
        return run_section(args.section, args.out, args.deadline, args.dry_run, args.work)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return orchestrate(args.out, args.budget_s, sections, args.dry_run, args.work)


if __name__ == "__main__":
    raise SystemExit(main())
