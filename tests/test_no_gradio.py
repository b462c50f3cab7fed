"""The engine is a library: importing it (and every module in it) must never import gradio."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_engine_never_imports_gradio():
    modules = sorted(p.stem for p in (ROOT / "engine").glob("*.py") if p.stem not in ("__main__",))
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module('engine' if m == '__init__' else 'engine.' + m)\n"
        "bad = [m for m in sys.modules if m == 'gradio' or m.startswith('gradio.')]\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


def test_no_gradio_import_statement_in_engine():
    for path in (ROOT / "engine").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "import gradio" not in text and "from gradio" not in text, path
