"""At 390 px (a phone), in headless Chromium: the date task's answers and the run history scroll sideways inside their
card with a scrollbar in view (they were cut at the card's edge, nothing saying they went on), and Compare's model
fields show their whole value (side by side, model A read "builtin:compac"). Issue 32; screenshots to $SCREENSHOT_DIR.

The browser keeps its scrollbars (Playwright hides them in headless mode) and emulates a phone, whose overlay scrollbars take no
room and show only while one scrolls: the test measures the room a kept-visible scrollbar takes. Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import CHROMIUM, FLAGS, finish_run, running_app

from engine.config import TrainConfig
from engine.runs import EventLog

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")

PHONE = {"width": 390, "height": 844}
# a scroll box: inside its card (right edges), wider content than its box (it scrolls), a scrollbar that takes room
SCROLL_BOX_JS = """([box, card]) => { const b = document.querySelector(box), c = b.closest(card);
  return {scrolls: b.scrollWidth > b.clientWidth + 1, bar: b.offsetHeight - b.clientHeight,
          inside: b.getBoundingClientRect().right <= c.getBoundingClientRect().right + 1,
          onScreen: c.getBoundingClientRect().right <= window.innerWidth + 1}; }"""
QUESTIONS = [["Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", "2023-09-05", "2023-09-05"],
             ["Escreva a data 12 de março de 1999 no formato ISO (AAAA-MM-DD).", "1999-03-12", "1999-03-21, and then some more words"]]


@pytest.fixture(scope="module")
def phone(tmp_path_factory):
    runs = tmp_path_factory.mktemp("phone-runs")
    run_dir = runs / "dates-run-with-a-longish-name"
    shutil.copytree(Path(__file__).resolve().parents[2] / "presets" / "models" / "compact-mini", run_dir / "model")
    finish_run(run_dir, TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=2, run_name=run_dir.name))
    EventLog(run_dir / "events.jsonl").write("task_score", when="after", accuracy=0.85, n=20, examples=QUESTIONS[:1], misses=QUESTIONS[1:])
    with running_app(runs) as demo, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, ignore_default_args=["--hide-scrollbars"])
        page = browser.new_context(viewport=PHONE, locale="en-US", is_mobile=True, has_touch=True).new_page()  # overlay scrollbars, as a phone
        page.goto(demo.local_url)
        yield page
        browser.close()


def _shot(page, name: str) -> None:
    if out := os.environ.get("SCREENSHOT_DIR"):
        Path(out).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(out) / f"{name}.png"))


def test_the_answers_and_the_history_scroll_inside_their_card_with_a_visible_bar(phone):
    phone.locator("#ft-panel-button").click()
    answers = phone.locator(".task-accuracy .scroll-x")
    answers.get_by_text("Converta a data").wait_for(timeout=120_000)
    answers.scroll_into_view_if_needed()
    box = phone.evaluate(SCROLL_BOX_JS, [".task-accuracy .scroll-x", ".block"])
    assert box["scrolls"] and box["inside"] and box["onScreen"] and box["bar"] > 0, box
    _shot(phone, "phone-date-answers")
    history = phone.locator("#finetune-history")
    history.get_by_text("dates-run-with-a").locator("visible=true").first.wait_for(timeout=60_000)
    history.scroll_into_view_if_needed()
    box = phone.evaluate(SCROLL_BOX_JS, ["#finetune-history .virtual-table-viewport", "#finetune-history"])
    assert box["scrolls"] and box["inside"] and box["onScreen"] and box["bar"] > 0, box
    _shot(phone, "phone-run-history")


def test_compares_model_fields_show_their_whole_value(phone):
    phone.locator("#pg-panel-button").click()
    phone.locator("button[role=tab]").filter(has_text="Compare").first.click()
    field = phone.locator("#playground-model-a input")
    sync_api.expect(field).to_have_value("builtin:compact-mini", timeout=60_000)
    field.scroll_into_view_if_needed()
    width = field.evaluate("(e) => [e.scrollWidth, e.clientWidth]")
    assert width[0] <= width[1], width  # the whole value in view, nothing cut
    _shot(phone, "phone-compare-models")
