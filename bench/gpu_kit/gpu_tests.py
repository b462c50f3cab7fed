"""Section b: the CUDA tests, `pytest -m gpu` (tests/test_gpu.py: QLoRA on CUDA with generation and memory events, the
precision policy on the real card, fp16 AMP QLoRA with the loss scale in the progress events and `scaler.pt` in every
checkpoint). Each test's outcome and, for a failure, its message are recorded from pytest's JUnit XML.

In the dry run (no CUDA) the GPU tests are only collected (`--collect-only`): they must still import and be found.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .common import ROOT, Context, engine_env

TITLE = "pytest -m gpu"
CAP_S = 75
NEEDS_CUDA = False  # the dry run collects them


def run(ctx: Context) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests/test_gpu.py", f"--junitxml={junit}"]
        if ctx.dry_run:
            cmd.append("--collect-only")
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=engine_env(), timeout=max(5.0, ctx.left() - 3))
        ctx.record("pytest", {"command": " ".join(cmd[1:]), "returncode": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:]})
        cases = junit_cases(junit) if junit.exists() else []
        ctx.record("tests", cases)
        if ctx.dry_run:
            collected = [line for line in proc.stdout.splitlines() if "::" in line]
            ctx.record("collected", collected)
            if proc.returncode != 0 or not collected:
                raise RuntimeError(f"the GPU tests did not collect (exit {proc.returncode})")
        elif proc.returncode != 0:
            raise RuntimeError(f"pytest -m gpu: exit {proc.returncode}")


def junit_cases(path: Path) -> list[dict[str, Any]]:
    """[{name, outcome: passed|failed|skipped, seconds, message}] from a JUnit XML report."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                message = (node.get("message") or "") + "\n" + (node.text or "")[-1500:]
                break
        cases.append({"name": case.get("name"), "outcome": outcome, "seconds": float(case.get("time") or 0), "message": message.strip()})
    return cases


def summary(r: dict[str, Any]) -> list[str]:
    if r.get("collected") is not None:
        return [f"- collected (dry run): {len(r['collected'])} GPU tests"]
    lines = [f"- {c['name']}: {c['outcome']} ({c['seconds']:.0f} s)" + (f" — {c['message'][:200]}" if c["outcome"] != "passed" else "")
             for c in r.get("tests", [])]
    return lines or [f"- no test report; pytest tail: {r.get('pytest', {}).get('tail', '')[-300:]}"]
