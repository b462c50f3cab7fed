"""The engine is a library: importing it (every module of every subpackage) must never import gradio."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent


def test_engine_never_imports_gradio():
    modules = ["engine"] + sorted(m.name for m in pkgutil.walk_packages(engine.__path__, prefix="engine.") if not m.name.endswith("__main__"))
    assert "engine.training.run" in modules and "engine.data" in modules  # the walk goes into subpackages
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m == 'gradio' or m.startswith('gradio.')]\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


def test_no_gradio_import_statement_in_engine():
    for path in (ROOT / "engine").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "import gradio" not in text and "from gradio" not in text, path
