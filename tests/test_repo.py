"""Repository contract: pinned requirements, Space front matter equal to the gradio pin, a clean notebook."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):  # an included file is checked on its own
            pins.update(_pins(line[3:].strip()))
            continue
        assert "==" in line, f"{name}: unpinned line {line!r}"
        pkg, ver = line.split("==")
        pins[pkg.lower().replace("_", "-")] = ver
    return pins


def test_requirements_are_pinned_and_match_design():
    pins = _pins("requirements.txt")
    for pkg in ("torch", "gradio", "gradio-client", "transformers", "tokenizers", "safetensors", "huggingface-hub", "accelerate", "peft",
                "bitsandbytes", "datasets"):
        assert pkg in pins, pkg
    assert pins["torch"] == "2.13.0"
    _pins("requirements-test.txt")


def test_space_front_matter_matches_gradio_pin():
    readme = (ROOT / "README.md").read_text()
    front = readme.split("---")[1]
    assert "sdk: gradio" in front and "app_file: app.py" in front
    assert re.search(r"sdk_version:\s*(\S+)", front).group(1) == _pins("requirements.txt")["gradio"]


def test_notebook_is_valid_and_has_no_outputs():
    nb = json.loads((ROOT / "colab_launch.ipynb").read_text())
    assert nb["nbformat"] == 4 and isinstance(nb["cells"], list) and nb["cells"]
    sources = "".join("".join(c["source"]) for c in nb["cells"])
    # the steps live in engine/notebook.py (tests/test_notebook.py): check the GPU first, install keeping a working torch,
    # launch as a child process whose exit status fails the cell (never `!python app.py`, which always shows green)
    assert sources.index("notebook.check_runtime()") < sources.index("notebook.install(") < sources.index("notebook.launch([\"--share\"]")
    assert "drive.mount" in sources and "!python" not in sources and "!pip" not in sources
    assert "Runtime → Change runtime type → **T4 GPU**" in sources
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code")
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_readme_commands_are_the_ci_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = next(line.strip() for line in readme.splitlines() if "requirements-test.txt" in line and "pytest" in line)
    assert test_cmd in ci
