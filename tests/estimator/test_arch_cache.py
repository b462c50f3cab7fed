"""The catalog's architectures kept as data: fresh for every catalog entry, equal to the meta-device count, and
`python -m engine estimate` answers for catalog and built-in models without importing torch or transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.estimator import arch_cache
from engine.estimator.catalog import catalog
from engine.estimator.model_config import measure_catalog_entry

ROOT = Path(__file__).resolve().parents[2]


def test_every_catalog_model_is_cached_and_fresh():
    """Fails after an edit of presets/models.yaml or of the Arch fields until the cache is refreshed (see
    engine/estimator/arch_cache.py for the command)."""
    stale = [e.name for e in catalog() if arch_cache.cached_arch(e) is None]
    assert not stale, f"presets/catalog_arch.json is stale for {stale}: refresh it (engine/estimator/arch_cache.py)"


@pytest.mark.parametrize("name", ["llama-3.2-1b", "qwen2.5-1.5b", "gemma-2-2b", "phi-2", "mistral-7b-v0.3", "gpt2"])
def test_cached_arch_equals_the_meta_device_count(name):
    entry = next((e for e in catalog() if e.name == name), None)
    if entry is None:
        pytest.fail(f"{name} is not in the catalog any more: pick another catalog model for this test")
    assert arch_cache.cached_arch(entry) == measure_catalog_entry(entry)


def test_a_stale_entry_is_measured_again(monkeypatch):
    entry = catalog()[0]
    monkeypatch.setattr(arch_cache, "fingerprint", lambda e: "changed")
    assert arch_cache.cached_arch(entry) is None


@pytest.mark.parametrize("model", ["builtin:compact-mini", "llama-3.2-1b", "Qwen/Qwen2.5-1.5B"])
def test_estimate_cli_answers_without_torch(model):
    code = ("import sys, contextlib, io\n"
            "from engine.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            f"    rc = main(['estimate', '--model', {model!r}, '--task', 'qlora', '--json'])\n"
            "print(out.getvalue())\n"
            "print('HEAVY', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
            "sys.exit(rc or 0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    body, _, heavy = proc.stdout.rpartition("HEAVY ")
    assert heavy.strip() == "[]", f"{model}: the estimate imported {heavy.strip()}"
    assert json.loads(body)["allocated_gib"] > 0
