"""Right on the first try (issue 32), in headless Chromium (Playwright), in Portuguese at 1440 px, each with a screenshot: the
estimator's plan for a T4 trains in fp16 and hands the Fine-tune form a precision a T4 accepts, the method's learning rate
written as the page writes numbers (0,0002), and a prediction for the T4 beside this machine's; a learning rate typed with a
decimal comma is read as typed; a CSV whose columns match no format is refused by Start with the reason beside the data field.

Screenshots go to $SCREENSHOT_DIR when it is set, else to the test's temporary folder. Every wait is for what the page shows,
never a fixed sleep (a slow, shared CPU). Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import CHROMIUM, running_app

from engine import config, i18n  # noqa: F401 - importing config registers the fields' English texts

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")

WAIT = 120_000  # ms: a busy 2-core machine
ESTIMATED_JS = """() => { const p = document.getElementById('est-panel'); return !!p && /\\d\\s*GiB/.test(p.innerText); }"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    runs = tmp_path_factory.mktemp("first-try-runs")
    with running_app(runs) as demo:
        yield demo.local_url, runs


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return Path(os.environ.get("SCREENSHOT_DIR") or tmp_path_factory.mktemp("first-try-shots"))


@pytest.fixture
def page(browser, app):
    ctx = browser.new_context(viewport={"width": 1440, "height": 900}, locale="pt-BR")
    p = ctx.new_page()
    p.goto(app[0])
    p.wait_for_function(ESTIMATED_JS, timeout=WAIT)
    yield p
    ctx.close()


def accordion(page, panel: str, key: str) -> None:
    """Open the accordion of a panel whose title is the Portuguese text of `key`."""
    title = re.compile(r"^\s*" + re.escape(i18n.t(key, "pt-BR")) + r"\s*[▼▲]?\s*$")
    page.locator(f"#{panel}-panel button.label-wrap").filter(has_text=title).first.click()


def value_of(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} input, #{elem_id} textarea").first.input_value()


def test_a_t4_plan_is_handed_over_for_the_t4(page, shots):
    page.locator("#estimator-tier input").click()
    page.get_by_role("option", name=i18n.t("estimator.tier.t4-16gb", "pt-BR")).first.click()
    # the estimator's own settings follow the card: a T4 trains in fp16 (it has no bf16)
    accordion(page, "est", "estimator.more_settings")
    page.wait_for_function("() => /fp16/.test(document.querySelector('#MemoryQuery-training_precision input')?.value)", timeout=WAIT)
    page.locator("#estimator-copy").click()
    prediction = page.locator("#finetune-prediction")
    prediction.get_by_text(re.compile("a placa planejada no estimador")).wait_for(timeout=WAIT)
    line = prediction.inner_text()
    assert "NVIDIA T4" in line and "fp16" in line and "14,7 GiB" in line, line
    accordion(page, "ft", "finetune.acc.training")
    page.wait_for_function("() => document.querySelector('#TrainConfig-learning_rate input, #TrainConfig-learning_rate textarea')?.value === '0,0002'",
                           timeout=WAIT)  # QLoRA's rate, as the Portuguese page writes numbers (not the date task's 0.001)
    assert value_of(page, "TrainConfig-precision") == "auto"  # never bf16 on a T4
    prediction.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "first-try-t4-handoff.png"), full_page=True)


def test_a_learning_rate_with_a_decimal_comma(page, shots):
    page.locator("#ft-panel-button").click()
    accordion(page, "ft", "finetune.acc.training")
    rate = page.locator("#TrainConfig-learning_rate input, #TrainConfig-learning_rate textarea").first
    rate.fill("0,0005")
    rate.press("Tab")
    accordion(page, "ft", "finetune.acc.command")
    page.get_by_role("button", name=i18n.t("finetune.command.button", "pt-BR"), exact=True).click()
    page.wait_for_function("() => [...document.querySelectorAll('#ft-panel .cm-content')].some(e => e.innerText.includes('learning_rate: 0.0005'))",
                           timeout=WAIT)
    assert page.locator(".toast-body").count() == 0  # not refused, not read as 5
    rate.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "first-try-decimal-comma.png"), full_page=True)


def test_start_refuses_bad_data_beside_the_data_field(page, app, shots, tmp_path):
    bad = tmp_path / "notas.csv"
    bad.write_text("foo,bar\n1,2\n3,4\n")
    page.locator("#ft-panel-button").click()
    page.locator("#finetune-upload input[type=file]").set_input_files(str(bad))
    page.locator("#finetune-upload").get_by_text("notas.csv").first.wait_for(timeout=WAIT)
    page.locator("#finetune-start").click()
    note = page.locator("#finetune-data-note")
    note.get_by_text(re.compile("não iniciou o treino")).wait_for(timeout=WAIT)
    assert "foo" in note.inner_text() and "notas.csv" in note.inner_text(), note.inner_text()
    assert [p.name for p in app[1].iterdir() if not p.name.startswith("_")] == []  # no run folder
    note.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "first-try-bad-data.png"), full_page=True)
