"""The Fine-tune panel as a person sees it, in Portuguese and in English (headless Chromium): Start/Stop near the top,
a finished run's loss plot, accuracy bars, a log that follows its newest line, the short history with details on select
and "Try it in the Playground". The run is a finished one written the way a real run leaves it (conftest.finish_run), so
nothing trains here."""

from __future__ import annotations

import pytest
from conftest import CHROMIUM, FLAGS, finish_run, running_app

from engine.config import TrainConfig

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")

TEXTS = {  # (locale, tab, start, status, history header, details line, try it)
    "pt-BR": ("Ajuste fino", "Iniciar treino", "ft-done: concluído", "situação", "modelo base", "Testar no Playground"),
    "en": ("Fine-tune", "Start training", "ft-done: finished", "status", "base model", "Try it in the Playground"),
}


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    runs = tmp_path_factory.mktemp("ft-runs")
    run_dir = runs / "ft-done"
    (run_dir / "model").mkdir(parents=True)
    finish_run(run_dir, TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", run_name="ft-done"))
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as fh:  # enough lines for the log box to scroll
        for i in range(60):
            fh.write(f'{{"type": "phase", "time": 0, "phase": "saving", "n": {i}}}\n')
    with running_app(runs) as demo:
        yield demo.local_url


@pytest.mark.parametrize("locale", ["pt-BR", "en"])
def test_the_panel_in_both_languages(app_url, locale):
    tab, start, status, header, detail, try_it = TEXTS[locale]
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_context(viewport={"width": 1440, "height": 900}, locale=locale).new_page()
        page.goto(app_url)
        page.get_by_role("tab", name=tab).click()
        page.get_by_text(status).first.wait_for(timeout=30_000)
        # Start/Stop are in the first screen, above every accordion
        start_box = page.get_by_role("button", name=start).bounding_box()
        assert start_box["y"] < 900
        first_accordion = page.locator("button.label-wrap").filter(has_text="preset").first.bounding_box()
        assert start_box["y"] < first_accordion["y"]
        assert page.locator("#finetune-history").get_by_text(header, exact=True).count() >= 1
        assert page.locator("#finetune-task").get_by_text("85%").count() == 1  # the accuracy after training, as a bar
        assert page.locator("#finetune-try").is_visible() and page.get_by_role("button", name=try_it).count() == 1
        # the log box follows its newest line
        page.wait_for_timeout(2500)
        top, height, client = page.evaluate("() => { const t = document.querySelector('#finetune-log textarea'); "
                                            "return [t.scrollTop, t.scrollHeight, t.clientHeight]; }")
        assert height > client and top + client >= height - 30
        # a row of the history shows the run's details
        page.locator("#finetune-history").get_by_role("gridcell", name="ft-done").first.click()
        page.locator("#finetune-run-details").get_by_text(detail).wait_for(timeout=10_000)
        browser.close()
