"""The README speaks both languages: its Portuguese section has the two commands exactly as the English part has them,
and every screenshot it shows exists, for each panel in both languages (tests/app/test_browser_i18n.py takes them)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def _commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.startswith("python3 -m venv")]


def test_portuguese_section_has_the_two_commands_verbatim():
    english = _commands(_section("The two commands"))
    assert len(english) == 2
    assert _commands(_section("Em português")) == english


def test_readme_shows_every_panel_in_both_languages_and_the_files_exist():
    shown = set(re.findall(r"docs/screenshots/([\w.-]+\.png)", README))
    for lang in ("en", "pt-BR"):
        for panel in ("estimator", "finetune", "playground"):
            assert {f"{panel}-{lang}.png", f"phone-{panel}-{lang}.png"} <= shown
    assert [name for name in sorted(shown) if not (ROOT / "docs" / "screenshots" / name).is_file()] == []
