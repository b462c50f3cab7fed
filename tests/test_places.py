"""Where the app runs: the Space's front matter agrees with the project (Python version, gradio pin, hardware) and
every pinned package supports that Python; the short description fits the Hub's 60 characters.

The wheels themselves are checked against the registry by hand (README "Where to run it": `pip install --dry-run
--python-version 3.11 --only-binary=:all:`); here, offline, each pinned package's own Requires-Python (the installed
distribution's metadata) must accept the front matter's Python: transformers 5.23 says >=3.11, which is what broke a
Space that ran on 3.10 by default."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from engine import space

ROOT = Path(__file__).resolve().parent.parent
# The Hub's hardware flavours a Space may suggest (huggingface_hub SpaceHardware)
HARDWARE = {"cpu-basic", "cpu-upgrade", "t4-small", "t4-medium", "l4x1", "l4x4", "a10g-small", "a10g-large", "a10g-largex2", "a10g-largex4",
            "a100-large", "l40sx1", "l40sx4", "l40sx8", "h100", "h100x8"}


def front_matter() -> dict:
    return yaml.safe_load((ROOT / "README.md").read_text(encoding="utf-8").split("---")[1])


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name] = version
    return out


def test_the_space_runs_the_python_the_project_requires():
    python = str(front_matter()["python_version"])
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert re.fullmatch(r"3\.\d+", python), "python_version: a quoted minor version such as \"3.11\" (unquoted 3.10 reads as 3.1)"
    assert requires == f">={python}", f"pyproject.toml requires-python {requires!r} must be >= the Space's Python {python}"


@pytest.mark.parametrize("package", sorted(pins()))
def test_every_pin_supports_the_space_python(package):
    python = Version(str(front_matter()["python_version"]) + ".0")
    dist = importlib.metadata.distribution(package)
    assert Version(dist.version).base_version == Version(pins()[package]).base_version, f"{package}: the installed version is not the pin"
    needs = dist.metadata.get("Requires-Python") or ""
    assert python in SpecifierSet(needs), f"{package}=={pins()[package]} needs Python {needs}, the Space runs {python}"


def test_the_front_matter_describes_the_space():
    front = front_matter()
    assert front["sdk"] == "gradio" and front["app_file"] == "app.py"
    assert str(front["sdk_version"]) == pins()["gradio"]
    assert 0 < len(front["short_description"]) <= 60
    assert front["suggested_hardware"] in HARDWARE and front["suggested_hardware"] == space.SUGGESTED_HARDWARE
