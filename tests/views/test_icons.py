"""Icons render without an emoji font: every symbol the page can show (the run title and history, the answers table,
the estimator's verdicts, the log) is a text symbol that DejaVu Sans draws, the font a bare Linux and Debian's Chromium
have, never an emoji that shows as an empty box where no emoji font is installed (issue 32)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Where the page's texts come from: the language files, the views, the page, and the engine's texts and tables.
SOURCES = [*ROOT.glob("presets/lang/*.yaml"), *ROOT.glob("engine/views/*.py"), *ROOT.glob("ui/*.py"), *ROOT.glob("engine/data/*.py"),
           *ROOT.glob("engine/estimator/*.py"), *ROOT.glob("engine/training/*.py"), ROOT / "engine/errors.py"]
# BMP characters whose default look is an emoji (Unicode's Emoji_Presentation): a colour font or an empty box
EMOJI_BMP = set(map(chr, [0x231A, 0x231B, 0x23E9, 0x23EA, 0x23EB, 0x23EC, 0x23F0, 0x23F3, 0x23F8, 0x23F9, 0x23FA, 0x25FD, 0x25FE, 0x2614,
                          0x2615, 0x267F, 0x2693, 0x26A1, 0x26AA, 0x26AB, 0x26BD, 0x26BE, 0x26C4, 0x26C5, 0x26CE, 0x26D4, 0x26EA, 0x26F2,
                          0x26F3, 0x26F5, 0x26FA, 0x26FD, 0x2705, 0x270A, 0x270B, 0x2728, 0x274C, 0x274E, 0x2753, 0x2754, 0x2755, 0x2757,
                          0x2795, 0x2796, 0x2797, 0x27B0, 0x27BF, 0x2B1B, 0x2B1C, 0x2B50, 0x2B55, 0xFE0F]))


def symbols() -> dict[str, str]:
    """Every character above Latin and common punctuation in the sources: {character: the first file that has it}."""
    found: dict[str, str] = {}
    for path in SOURCES:
        for ch in path.read_text(encoding="utf-8"):
            if ord(ch) >= 0x2100 or ch in EMOJI_BMP:
                found.setdefault(ch, str(path.relative_to(ROOT)))
    return found


def test_no_emoji_in_what_the_page_shows():
    emoji = {ch: where for ch, where in symbols().items() if ord(ch) >= 0x1F000 or ch in EMOJI_BMP}
    assert not emoji, f"emoji need an emoji font (empty boxes without one): {emoji}"


@functools.cache
def _dejavu_has(ch: str) -> bool:
    out = subprocess.run(["fc-list", f":charset={ord(ch):x}", "family"], capture_output=True, text=True, timeout=30).stdout
    return any(line.split(",")[0].strip() == "DejaVu Sans" for line in out.splitlines())


@pytest.mark.skipif(shutil.which("fc-list") is None or not _dejavu_has("A"), reason="fontconfig with DejaVu Sans (fonts-dejavu-core) not installed")
def test_dejavu_sans_draws_every_symbol():
    missing = {ch: where for ch, where in symbols().items() if not _dejavu_has(ch)}
    assert not missing, f"not in DejaVu Sans (an empty box without an emoji or symbol font): {missing}"
