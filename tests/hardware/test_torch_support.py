"""The runtime's torch against what the engine needs (engine/hardware/torch_support.py): one plain message naming both
versions below the floor; at the floor itself the engine imports and a training step runs (nothing else in the engine
keys on the version). Colab, Kaggle and the lent GPU machine each bring their own torch (2.11 there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.errors import EngineError
from engine.hardware.torch_support import MIN_TORCH, NEEDS, check_torch, missing_feature, version_tuple
from engine.notebook import TORCH_RANGE

ROOT = Path(__file__).resolve().parents[2]
FLOOR = ".".join(map(str, MIN_TORCH))


@pytest.mark.parametrize("version", ["2.6.0", "2.6.0a0+git1234", "2.11.0+cu130", "2.13.0", "3.0.0"])
def test_versions_from_the_floor_on_pass(version):
    check_torch(version)
    assert missing_feature(version) is None


@pytest.mark.parametrize("version,needed", [("2.5.1", "2.6"), ("2.4.0+cu121", "2.6"), ("2.2.2", "2.6"), ("1.13.1", "2.6")])
def test_an_older_torch_gets_one_message_naming_both_versions(version, needed):
    with pytest.raises(EngineError) as info:
        check_torch(version)
    for lang in ("en", "pt-BR"):
        text = info.value.render(lang)
        assert version in text and f"torch {needed}" in text and "\n" not in text
        assert "transformers 5.23" in text  # what needs the floor, in the reader's language
    assert info.value.key == "torch_runtime.too_old"


def test_the_floor_is_the_newest_need_and_the_notebook_keeps_torch_from_it():
    assert MIN_TORCH == max(v for v, _ in NEEDS)
    assert TORCH_RANGE[0] == MIN_TORCH  # engine/notebook.py keeps a runtime torch from the same floor
    assert version_tuple("2.11.0+cu130") == (2, 11, 0) and version_tuple("2.6") == (2, 6)


def _python(code: str, runs: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LC_ALL="en_US.UTF-8")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_the_engine_refuses_an_older_torch_at_its_first_use():
    """The CLI's generate under torch "2.5.1": exit 2 with the one line, no traceback (the estimator of a built-in model
    needs no torch model code, so it is not where the check fires)."""
    proc = _python("""
        import torch
        from torch.torch_version import TorchVersion
        torch.__version__ = TorchVersion("2.5.1")  # what an older torch's __version__ is (it compares with tuples too)
        from engine.cli import main
        raise SystemExit(main(["generate", "--model", "builtin:compact-mini", "--prompt", "hi", "--max-new-tokens", "1"]))
    """)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: This runtime's torch is 2.5.1;") and f"torch {FLOOR} or newer" in line


def test_at_the_floor_the_engine_imports_and_trains_a_step(runs_dir, tmp_path):
    """torch.__version__ set to the floor before the engine is imported: a LoRA step on the built-in model runs."""
    proc = _python(f"""
        import json, torch
        from torch.torch_version import TorchVersion
        torch.__version__ = TorchVersion("{FLOOR}.0")  # as a real torch's __version__ (libraries compare it with tuples)
        from pathlib import Path
        from engine.config import TrainConfig
        from engine.training.run import run_training
        runs = Path({str(runs_dir)!r})
        cfg = TrainConfig(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=1, micro_batch_size=2,
                          max_seq_len=48, logging_steps=1, eval_fraction=0.0, sample_generations=False, run_name="old-torch-step")
        done = run_training(cfg, Path({str(tmp_path)!r}) / "old-torch-step", runs_dir=runs)
        print("RESULT " + json.dumps({{"type": done["type"], "steps": done.get("steps"), "version": torch.__version__}}))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["type"] == "done" and result["version"] == f"{FLOOR}.0"
