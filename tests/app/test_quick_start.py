"""Quick start: building the page imports neither the model, training and generation code nor transformers (the
presets are read as data; the heavy stacks load on the first click that needs them). bench/startup.py times it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("transformers", "peft", "torch._dynamo", "torch.distributed.tensor", "engine.models.compact", "engine.models.loading",
         "engine.training.run", "engine.inference.generate")


def test_building_the_page_imports_no_model_stack(tmp_path):
    code = ("import sys, app\n"
            f"app.build_app(__import__('pathlib').Path({str(tmp_path)!r}))\n"
            f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []", proc.stdout[-2000:]
