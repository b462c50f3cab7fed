"""A Space's page in a browser (headless Chromium): the demo notice with the limits, the storage warning and a working
"Duplicate this Space" link, in English and in Portuguese. No training: a few seconds.

Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import pytest
from conftest import CHROMIUM, running_app

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")


def test_the_space_page_shows_its_limits_storage_and_duplicate_link(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/compact-llm-lab")
    monkeypatch.setenv("SPACE_HOST", "someone-compact-llm-lab.hf.space")
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    with running_app(tmp_path / "runs") as demo:
        for locale, words, link in (("en-US", "Each run may take at most 600 steps", "Duplicate this Space"),
                                    ("pt-BR", "Cada treino pode ter no máximo 600 passos", "Duplique este Space")):
            context = browser.new_context(locale=locale, viewport={"width": 390, "height": 844})  # a phone
            page = context.new_page()
            page.goto(demo.local_url)
            notice = page.locator("#space-notice")
            notice.get_by_text(words).wait_for(timeout=60_000)
            assert "600" in notice.inner_text() and ("restarts" in notice.inner_text() or "reinicia" in notice.inner_text())
            href = notice.get_by_role("link", name=link).get_attribute("href")
            assert href == "https://huggingface.co/spaces/someone/compact-llm-lab?duplicate=true"
            page.locator("#panels-button, button[role=tab]").filter(has_text="Fine-tune" if locale == "en-US" else "Ajuste fino").first.click()
            page.get_by_text("waits in line and starts by itself" if locale == "en-US" else "espera na fila e começa sozinho").first.wait_for(timeout=30_000)
            context.close()
