"""What a person clicks, in headless Chromium (Playwright): estimate, train from the form, generate.

Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it. Set SCREENSHOT_DIR to keep
screenshots of each panel (the README's screenshot comes from here).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import CHROMIUM, FLAGS, wait_for_no_live_run

from engine import i18n

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")


@pytest.fixture(scope="module")
def page(runs_dir):
    import app

    demo = app.build_app(runs_dir)
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **app.launch_options())
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.goto(demo.local_url)
        yield pg
        browser.close()
    demo.close()


def _shot(page, name):
    out = os.environ.get("SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(out) / f"{name}.png"), full_page=True)


def test_estimator_shows_breakdown_and_verdicts(page):
    page.get_by_text("allocated by PyTorch").first.wait_for(timeout=30_000)
    page.get_by_text("Verdict per card").first.wait_for(timeout=10_000)
    from engine.estimator.catalog import hardware_tiers

    # opens on a real instruct model, with a bar and a verdict in words for every card
    # (the tests run offline: the Hub model is marked as needing the internet, engine/views/offline.py)
    assert page.locator("#estimator-model input").input_value().startswith("Qwen/Qwen2.5-1.5B-Instruct")
    bars = page.locator("#estimator-bars")
    bars.get_by_text("NVIDIA T4 · 16 GB").first.wait_for(timeout=30_000)
    assert bars.locator('[role="img"]').count() == len(hardware_tiers())
    assert "t4-16gb" not in bars.inner_text() and "fits" in bars.inner_text()
    assert "to spare" in page.locator("#estimator-limits").inner_text()
    _shot(page, "estimator")


def test_estimator_in_portuguese(page):
    from engine.estimator.catalog import hardware_tiers

    ctx = page.context.browser.new_context(locale="pt-BR", viewport={"width": 1400, "height": 1000})
    try:
        pt = ctx.new_page()
        pt.goto(page.url)
        bars = pt.locator("#estimator-bars")
        bars.get_by_text("Memória por placa").wait_for(timeout=60_000)
        assert bars.locator('[role="img"]').count() == len(hardware_tiers()) and "cabe" in bars.inner_text()
        assert "alocados pelo PyTorch" in pt.locator("#estimator-totals").inner_text()
        assert "de folga" in pt.locator("#estimator-limits").inner_text()
        assert "Para onde vai a memória" in pt.locator("#estimator-breakdown-chart").inner_text()
        _shot(pt, "estimator-pt-BR")
    finally:
        ctx.close()


def test_train_from_the_form_then_generate(page, runs_dir):
    page.get_by_role("tab", name="Fine-tune").click()
    page.get_by_text("Training", exact=True).first.click()  # open the accordion
    steps = page.locator("#TrainConfig-max_steps input")
    steps.fill("6")
    steps.press("Tab")
    wait_for_no_live_run(runs_dir)
    page.get_by_role("button", name="Start training").click()
    try:
        page.get_by_text(": finished").first.wait_for(timeout=240_000)
        page.get_by_text("date task accuracy").first.wait_for(timeout=10_000)
    finally:
        _shot(page, "finetune")
    _shot(page, "finetune")

    page.get_by_role("tab", name="Playground").click()
    page.get_by_role("button", name="Refresh model list").click()
    model = page.locator("#playground-model input")
    model.click()
    page.get_by_role("option", name="run:").first.click()
    page.get_by_role("textbox", name="Prompt", exact=True).fill("Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).")
    page.get_by_role("button", name="Generate", exact=True).click()
    page.locator("#playground-stats").get_by_text("ended:").wait_for(timeout=60_000)
    _shot(page, "playground")


def test_teacher_fields_show_for_distillation_only(page):
    page.get_by_role("tab", name="Fine-tune").click()
    teacher = page.get_by_text("Teacher model (distill)")
    assert teacher.count() == 0  # the default method is 'full'
    method = page.locator("#TrainConfig-method input")
    method.click()
    def label(method: str) -> str:  # the option's label, as the page shows it (presets/lang/en.yaml)
        return i18n.t(f"text.choice.TrainConfig.method.{method}", "en")

    page.get_by_role("option", name=label("distill"), exact=True).click()
    teacher.first.wait_for(timeout=10_000)
    method.click()
    page.get_by_role("option", name=label("full"), exact=True).click()
    teacher.first.wait_for(state="detached", timeout=10_000)
