"""The estimator's edges and the hand-off, in headless Chromium (Playwright), each with a screenshot: a model found by the
way people write it, an unknown model (no empty tables, no hand-off), a CPU card in CPU words, the breakdown on a 390 px
phone, the Fine-tune form's Epochs field and an uploaded file's name; offline, the hand-off opens the Fine-tune tab,
says the Hub model needs the internet and offers the built-in model, one click away.

The app runs offline (HF_HUB_OFFLINE=1, tests/conftest.py). Screenshots go to $SCREENSHOT_DIR when it is set, else to the
test's temporary folder (they are not the README's). Every wait is for what the page shows, never a fixed sleep: the
tests run on a slow, shared CPU. Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import CHROMIUM, running_app

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")

DESKTOP, PHONE = {"width": 1440, "height": 900}, {"width": 390, "height": 844}
WAIT = 120_000  # ms: a busy 2-core machine
ESTIMATED_JS = """() => { const p = document.getElementById('est-panel'); return !!p && /\\d\\s*GiB/.test(p.innerText); }"""
TOTALS_JS = """(text) => (document.getElementById('estimator-totals') || {}).innerText?.includes(text)"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("states-runs")) as demo:
        yield demo.local_url


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return Path(os.environ.get("SCREENSHOT_DIR") or tmp_path_factory.mktemp("states-shots"))


def _open(browser, url: str, viewport: dict):
    ctx = browser.new_context(viewport=viewport, locale="en-US")
    page = ctx.new_page()
    page.goto(url)
    page.wait_for_function(ESTIMATED_JS, timeout=WAIT)
    return ctx, page


def _model(page, text: str) -> None:
    """Type into the model dropdown (it accepts a typed value) and leave it."""
    field = page.locator("#estimator-model input")
    field.click()
    field.fill(text)


def test_a_model_is_found_however_its_name_is_written(browser, app_url, shots):
    ctx, page = _open(browser, app_url, DESKTOP)
    try:
        _model(page, "Llama 3.1 8B")  # the catalog spells it llama-3.1-8b
        option = page.get_by_role("option", name="Llama 3.1 8B · llama-3.1-8b")
        option.wait_for(timeout=WAIT)
        page.screenshot(path=str(shots / "estimator-search.png"))
        option.click()
        page.wait_for_function(TOTALS_JS, arg="llama-3.1-8b", timeout=WAIT)
        # typed another way and entered as is: the same model
        _model(page, "qwen 2.5 0.5b")
        page.locator("#estimator-model input").press("Enter")
        page.wait_for_function(TOTALS_JS, arg="qwen2.5-0.5b", timeout=WAIT)
    finally:
        ctx.close()


def test_an_unknown_model_shows_its_warning_without_empty_tables_or_a_hand_off(browser, app_url, shots):
    ctx, page = _open(browser, app_url, DESKTOP)
    try:
        assert page.locator("#estimator-copy").is_enabled()
        _model(page, "nobody-here/no-such-model")
        page.locator("#estimator-model input").press("Enter")
        page.wait_for_function(TOTALS_JS, arg="⚠", timeout=WAIT)
        page.locator("#estimator-breakdown").wait_for(state="hidden", timeout=WAIT)
        page.wait_for_function("() => document.getElementById('estimator-copy').disabled", timeout=WAIT)
        assert not page.locator("#estimator-verdicts").is_visible()
        assert not page.get_by_role("columnheader", name="1", exact=True).is_visible()  # gradio's empty table: headers 1 2 3
        page.screenshot(path=str(shots / "estimator-unknown-model.png"), full_page=True)
        _model(page, "builtin:compact-mini")  # a model it knows: the tables and the hand-off come back
        page.locator("#estimator-model input").press("Enter")
        page.locator("#estimator-breakdown").wait_for(state="visible", timeout=WAIT)
        page.wait_for_function("() => !document.getElementById('estimator-copy').disabled", timeout=WAIT)
    finally:
        ctx.close()


def test_a_cpu_card_is_said_in_cpu_words(browser, app_url, shots):
    ctx, page = _open(browser, app_url, DESKTOP)
    try:
        tier = page.locator("#estimator-tier input")
        tier.click()
        page.get_by_role("option", name="CPU · 16 GB RAM").first.click()
        breakdown = page.locator("#estimator-breakdown")
        breakdown.get_by_text("Python runtime").first.wait_for(timeout=WAIT)
        panel = page.locator("#est-panel")
        assert "CUDA context" not in breakdown.inner_text() and "nvidia-smi" not in page.locator("#estimator-totals").inner_text()
        assert "CUDA context" not in panel.locator("#estimator-breakdown-chart").inner_text()
        breakdown.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "estimator-cpu-terms.png"), full_page=True)
    finally:
        ctx.close()


def test_the_breakdown_fits_a_phone(browser, app_url, shots):
    ctx, page = _open(browser, app_url, PHONE)
    try:
        table = page.locator("#estimator-breakdown")
        table.get_by_role("columnheader", name="what it is").wait_for(timeout=WAIT)
        table.scroll_into_view_if_needed()
        widths = table.evaluate("""e => ({box: e.querySelector('.table-wrap').clientWidth,
                                        table: e.querySelector('table').getBoundingClientRect().width})""")
        assert widths["table"] <= widths["box"] + 1, widths  # every column in view, none cut off at the right
        table.screenshot(path=str(shots / "phone-estimator-breakdown.png"))
    finally:
        ctx.close()


def test_the_epochs_field_and_an_uploaded_files_name_are_readable(browser, app_url, shots, tmp_path):
    ctx, page = _open(browser, app_url, DESKTOP)
    try:
        page.locator("#ft-panel-button").click()
        label = page.locator("#TrainConfig-epochs label").first
        label.wait_for(timeout=WAIT)
        # the label and its help keep their width (they were squeezed beside the number box, one word per line)
        assert label.bounding_box()["width"] >= 150, label.bounding_box()
        data = tmp_path / "my_training_data.csv"
        data.write_text("instruction,output\nHi,Hello\n")
        page.locator("#finetune-upload input[type=file]").set_input_files(str(data))
        name = page.locator("#finetune-upload td.filename")
        name.wait_for(timeout=WAIT)
        seen = name.evaluate("""e => [...e.querySelectorAll('.stem, .ext')].every((s) => s.scrollWidth <= s.clientWidth + 1)
                                      && e.getBoundingClientRect().width >= 60""")
        assert seen and name.inner_text().replace("\n", "").replace(" ", "") == "my_training_data.csv"
        page.screenshot(path=str(shots / "finetune-epochs-upload.png"))
    finally:
        ctx.close()


def test_the_hand_off_opens_fine_tune_and_offers_the_built_in_model_offline(browser, app_url, shots):
    ctx, page = _open(browser, app_url, DESKTOP)
    try:
        # the default model is a Hub model: offline, the list marks it
        assert "needs the internet" in page.locator("#estimator-model input").input_value()
        page.locator("#estimator-copy").click()
        page.wait_for_function("() => document.getElementById('ft-panel-button')?.getAttribute('aria-selected') === 'true'", timeout=WAIT)
        page.get_by_text("needs the internet, which this app does not have now").first.wait_for(timeout=WAIT)
        use_builtin = page.locator("#finetune-use-builtin")
        use_builtin.wait_for(state="visible", timeout=WAIT)
        page.locator("#finetune-prediction").get_by_text("is downloaded from the Hugging Face Hub").wait_for(timeout=WAIT)
        page.screenshot(path=str(shots / "handoff-offline.png"))
        use_builtin.click()
        page.wait_for_function("() => document.querySelector('#TrainConfig-base_model input')?.value === 'builtin:compact-mini'", timeout=WAIT)
        use_builtin.wait_for(state="hidden", timeout=WAIT)
    finally:
        ctx.close()
