"""The page in both languages and at a phone's width, in headless Chromium (Playwright), with the screenshots the README
shows: the page opens in the browser's language and the Português/English switch flips it and keeps it after a reload;
the estimator opens on a real model with a verdict for every card; the guided strip opens each panel; at 390 px every
panel is reachable and starts with its results, not with a long form, and tables scroll inside their box.

One app and one browser for the module; one desktop (1440×900) and one phone (390×844) page per language. The
screenshots (estimator|finetune|playground-<lang>.png, phone-<panel>-<lang>.png) go to docs/screenshots/, or to
$SCREENSHOT_DIR when it is set. Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import CHROMIUM, running_app

from engine import i18n
from engine.estimator import catalog

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("SCREENSHOT_DIR") or ROOT / "docs" / "screenshots")
LOCALES = {"en": "en-US", "pt-BR": "pt-BR"}  # the browser's language -> the page's
PANELS = (("est", "estimator", "guide-estimate"), ("ft", "finetune", "guide-finetune"), ("pg", "playground", "guide-try"))
DESKTOP, PHONE = {"width": 1440, "height": 900}, {"width": 390, "height": 844}

# Every status tracker of the open panel idle (no load, no generation going on): what a screenshot may show.
READER_RUNS = "~/compact-llm-lab/runs"
IDLE_JS = """() => [...document.querySelectorAll('[data-testid="status-tracker"]')]
  .every((s) => s.classList.contains('hide') || s.offsetParent === null)"""
ESTIMATED_JS = """() => { const p = document.getElementById('est-panel'); return !!p && /\\d\\s*GiB/.test(p.innerText); }"""


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory) -> Path:
    """Its own empty runs folder: the README's pictures show the page a new reader opens, whatever ran before."""
    return tmp_path_factory.mktemp("i18n-runs")


@pytest.fixture(scope="module")
def app_url(page_runs):
    with running_app(page_runs) as demo:
        yield demo.local_url


@pytest.fixture(scope="module", params=list(LOCALES))
def lang(request) -> str:
    return request.param


def open_page(browser, url: str, lang: str, viewport: dict, **context_args):
    """A new browser context whose language is `lang`'s locale, on the app, once the first estimate is shown."""
    ctx = browser.new_context(viewport=viewport, locale=LOCALES[lang], **context_args)
    page = ctx.new_page()
    page.goto(url)
    page.wait_for_function(ESTIMATED_JS, timeout=90_000)
    return page


@pytest.fixture(scope="module")
def desktop(browser, app_url, lang):
    page = open_page(browser, app_url, lang, DESKTOP)
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def phone(browser, app_url, lang):
    page = open_page(browser, app_url, lang, PHONE, is_mobile=True, has_touch=True)
    yield page
    page.context.close()


def settle(page) -> None:
    """Wait until what the page shows stops changing: fonts loaded, no component loading or generating."""
    page.evaluate("document.fonts.ready.then(() => true)")
    page.wait_for_function(IDLE_JS, timeout=60_000)
    page.wait_for_timeout(300)


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    # the README's pictures show the runs folder of a reader's clone, not pytest's temporary one (the only change)
    page.evaluate("(p) => document.querySelectorAll('#page-notice code').forEach((c) => { c.textContent = p; })", READER_RUNS)
    settle(page)
    page.screenshot(path=str(SHOTS / f"{name}.png"), animations="disabled", caret="hide")


def open_tab(page, tab_id: str) -> None:
    """Open a panel with its own tab button (not the guided strip), and scroll back to the top of the page."""
    page.locator(f"#{tab_id}-panel-button").click()
    page.locator(f"#{tab_id}-panel").wait_for(state="visible")
    page.evaluate("window.scrollTo(0, 0)")


def page_texts(page) -> dict[str, str]:
    return page.evaluate("""() => ({
      tab: document.getElementById('est-panel-button').innerText.trim(),
      step: document.getElementById('guide-estimate').innerText.trim(),
      intro: document.getElementById('page-intro').innerText.trim(),
      notice: document.getElementById('page-notice').innerText.trim(),
    })""")


def expected_texts(lang: str, runs_dir: Path) -> dict[str, str]:
    return {"tab": i18n.t("estimator.tab", lang), "step": i18n.t("app.guide.estimate", lang), "intro": i18n.t("app.intro", lang),
            "notice": i18n.t("app.runs_folder", lang, path=str(runs_dir)).replace("`", "")}


# ---- (a) the browser's language, the switch, a reload ---------------------------------------------------------------

def test_page_opens_in_the_browsers_language_and_the_switch_keeps_the_other(browser, app_url, lang, page_runs):
    other = "pt-BR" if lang == "en" else "en"
    page = open_page(browser, app_url, lang, DESKTOP)  # its own context: the switch writes the browser's local storage
    try:
        page.wait_for_function("(t) => document.getElementById('guide-estimate').innerText.trim() === t", arg=i18n.t("app.guide.estimate", lang))
        assert page_texts(page) == expected_texts(lang, page_runs)  # static texts (gr.I18n) and the server-built line (tr)
        assert page.locator("#lang-switch input:checked").get_attribute("value") == lang
        with page.expect_navigation():  # the switch reloads the page in the chosen language
            page.locator("#lang-switch label").filter(has_text="English" if other == "en" else "Português").click()
        for _ in range(2):  # after the switch's own reload, then after the visitor's
            page.wait_for_function(ESTIMATED_JS, timeout=90_000)
            page.wait_for_function("(t) => document.getElementById('guide-estimate').innerText.trim() === t", arg=i18n.t("app.guide.estimate", other))
            assert page_texts(page) == expected_texts(other, page_runs)
            assert page.locator("#lang-switch input:checked").get_attribute("value") == other
            page.reload()
    finally:
        page.context.close()


# ---- (b) the estimator's defaults -------------------------------------------------------------------------------

def verdict_words(lang: str) -> set[str]:
    words = {i18n.t(f"estimator.verdict.{v}", lang) for v in ("fits", "tight", "no")}
    return words if not any(w.startswith("estimator.") for w in words) else {"fits", "tight", "does not fit"}


def test_estimator_opens_on_a_real_model_with_a_verdict_per_card(desktop, lang):
    open_tab(desktop, "est")
    # the model dropdown (#estimator-model), else the form's first field
    field = desktop.locator("#estimator-model input") if desktop.locator("#estimator-model input").count() else \
        desktop.locator("#est-panel .form-results > .column:first-child input").first
    model = field.input_value().split(" · ")[0]  # the label shows the id, then its note ("needs the internet" offline)
    assert not model.startswith("builtin:"), f"the estimator opens on the toy model {model!r}, not a real one"
    assert catalog.catalog_lookup(model) is not None, f"{model!r} is not a catalog model"
    # one verdict per card: the bars' rows (each names its card and verdict) or, without bars, the table's rows
    tiers = catalog.hardware_tiers()
    labels = desktop.locator("#est-panel [role='img'][aria-label]").evaluate_all("(els) => els.map((e) => e.getAttribute('aria-label'))")
    words = verdict_words(lang)
    per_card = [lab for lab in labels if any(w in lab for w in words)]
    if not per_card:
        per_card = desktop.locator("#est-panel tbody tr").evaluate_all(
            "(rows) => rows.filter((r) => r.offsetParent !== null).map((r) => r.innerText)")
        per_card = [row for row in per_card if any(w in row for w in words)]
    assert len(per_card) >= len(tiers), f"{len(per_card)} verdicts for {len(tiers)} cards: {per_card}"


# ---- the guided strip and (d) the screenshots, 1440×900 ------------------------------------------------------------

def test_guided_strip_opens_each_panel_and_screenshots(desktop, lang):
    for tab_id, name, step in PANELS:
        desktop.evaluate("window.scrollTo(0, 0)")
        button = desktop.locator(f"#{step}")
        assert button.inner_text().strip() == i18n.t(f"app.{step.replace('-', '.')}", lang)
        button.click()
        desktop.locator(f"#{tab_id}-panel-button[aria-selected='true']").wait_for(timeout=10_000)
        assert desktop.locator(f"#{tab_id}-panel").is_visible()
        shot(desktop, f"{name}-{lang}")
    hints = desktop.locator("#guide .block.guide-hint").all_inner_texts()
    assert [h.strip() for h in hints] == [i18n.t(f"app.guide.{k}_hint", lang) for k in ("estimate", "finetune", "try")]


# ---- (c) a phone: 390 px ----------------------------------------------------------------------------------------

FIRST_SCREEN_JS = """(panelId) => {
  const panel = document.getElementById(panelId);
  const top = panel.getBoundingClientRect().top + window.scrollY;
  const shown = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden'; };
  // form fields a person fills in (each gradio block counted once), within one screen below the top of the panel
  const fields = new Set();
  for (const e of panel.querySelectorAll('input, textarea, select')) {
    if (!shown(e) || e.readOnly || e.disabled || e.type === 'hidden' || e.type === 'file') continue;
    const y = e.getBoundingClientRect().top + window.scrollY;
    if (y < top + window.innerHeight) fields.add(e.closest('.block') || e);
  }
  const row = panel.querySelector('.form-results');
  const cols = row ? [...row.children].filter((c) => c.classList.contains('column')) : [];
  const y = (e) => e.getBoundingClientRect().top;
  return {fields: fields.size, rows: !!row, results_first: cols.length === 2 && y(cols[1]) < y(cols[0])};
}"""

TABLES_JS = """(panelId) => {
  const panel = document.getElementById(panelId);
  const out = [];
  for (const table of panel.querySelectorAll('table')) {
    const box = table.getBoundingClientRect();
    if (box.width === 0 || table.offsetParent === null) continue;
    const heads = [...table.querySelectorAll('thead th')].filter((th) => th.getBoundingClientRect().width > 0);
    if (!heads.length) continue;
    // the nearest box that scrolls sideways: what does not fit must scroll there, inside the table's block
    let scroller = table.parentElement;
    while (scroller && scroller !== panel && !['auto', 'scroll'].includes(getComputedStyle(scroller).overflowX)) scroller = scroller.parentElement;
    const view = (scroller && scroller !== panel ? scroller : panel).getBoundingClientRect();
    // a header word broken over two lines has two boxes
    const broken = [];
    for (const th of heads) {
      const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const m of node.data.matchAll(/\\S+/g)) {
          const range = document.createRange();
          range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
          const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
          if (lines.size > 1) broken.push(m[0]);
        }
      }
    }
    out.push({
      header: heads.map((th) => th.innerText.trim()).join(' | '),
      scrolls: !!scroller && scroller !== panel && scroller.scrollWidth >= Math.floor(box.width),
      wider: box.width > view.width + 1,
      second_column_in_view: heads.length < 2 || heads[1].getBoundingClientRect().left < view.right - 8,
      broken,
    });
  }
  return out;
}"""


def test_phone_reaches_every_panel_results_first_tables_readable(phone, lang):
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], "the page scrolls sideways at 390 px"
    for tab_id, name, _step in PANELS:
        button = phone.locator(f"#{tab_id}-panel-button")
        box = button.bounding_box()
        assert button.is_visible() and box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], f"the {name} tab is not on screen"
        open_tab(phone, tab_id)
        first = phone.evaluate(FIRST_SCREEN_JS, f"{tab_id}-panel")
        assert first["rows"] and first["results_first"], f"{name}: the results do not come before the form at 390 px"
        # the results' own controls (the run picker, the loss plot's log scale and smoothing) are not a form
        assert first["fields"] <= 3, f"{name}: the first screen of the panel is a form ({first['fields']} fields)"
        for table in phone.evaluate(TABLES_JS, f"{tab_id}-panel"):
            assert not table["broken"], f"{name}: header words broken mid-word: {table}"
            assert table["second_column_in_view"], f"{name}: a table shows only its first column: {table}"
            assert not table["wider"] or table["scrolls"], f"{name}: a table is cut off instead of scrolling: {table}"
        if tab_id == "ft" and phone.locator("#finetune-start").count():
            start = phone.locator("#finetune-start").bounding_box()
            assert start and start["y"] + start["height"] <= PHONE["height"], "Start is not on screen on a phone"
        shot(phone, f"phone-{name}-{lang}")
