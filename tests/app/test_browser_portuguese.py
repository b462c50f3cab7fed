"""No English on the Portuguese page (issue 23), in headless Chromium (Playwright): a visitor whose browser speaks
Portuguese walks the main flows (the estimator's first estimate and make-it-fit advice, an empty upload, a learning rate that
is not a number, a run that failed while reading its data, a chat answer and a batch in the playground) and every text the
page shows is checked against the English texts of the language files: a sentence fragment that only the English file has
fails the test, and so do Python spellings (None, True) and an upload's internal hash prefix.

One app and one browser context for the module; each step waits for what the page shows (no fixed sleeps: the machine that
runs these is a slow, shared CPU). Needs Chromium (Debian: `apt-get install chromium`); .ci/run installs it.
"""

from __future__ import annotations

import json
import re
import time
import warnings

import pytest
from conftest import CHROMIUM, running_app

from engine import config, i18n  # noqa: F401 - importing config registers the fields' English texts
from engine.errors import DataError
from engine.views.finetune_form import METHOD_DEFAULTS

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")

HASHED = re.compile(r"\b[0-9a-f]{20}-")  # engine/views/uploads.py keep_upload's prefix
PYTHON = re.compile(r"\b(None|True|False)\b|\['")
# Words that make a fragment English (a fragment needs one of them: names such as "LoRA rank" or "GGUF" pass).
ENGLISH = {"the", "is", "are", "of", "to", "and", "with", "on", "in", "for", "not", "your", "this", "it", "be", "can", "from", "or", "an",
           "was", "has", "have", "no", "at", "by", "as", "that", "which", "when", "you", "use", "there", "its", "will", "only", "what", "how",
           "run", "model", "file", "error", "left", "about", "step", "steps", "loading", "training", "memory", "fits", "does", "fit"}
# What may read the same in both languages although the English file has it: names and ids.
ALLOW = {"compact llm lab", "hugging face", "lora", "qlora", "english"}
# Shown by the page but not made of our words: the model's own answers, the visitor's typed text, gradio's footer.
# (gradio 6 draws a table's rows as divs in .virtual-body: the batch's answers are there, and the model may answer in English)
SKIP_SELECTORS = ["#playground-chat", "#playground-prompt", "footer", "#lang-switch", "[data-testid='table'] tbody", ".gradio-dataframe tbody",
                  "#playground-batch-table .virtual-body"]

VISIBLE_TEXT_JS = """(skip) => {
  const skipped = skip.flatMap((s) => [...document.querySelectorAll(s)]);
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || !n.data.trim() || ['SCRIPT', 'STYLE', 'NOSCRIPT'].includes(el.tagName)) continue;
    if (skipped.some((s) => s.contains(el))) continue;
    if (el.checkVisibility && !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
    out.push(n.data.trim());
  }
  for (const e of document.querySelectorAll('input[type=text], textarea')) {  // values the page wrote (not typed ones)
    if (skipped.some((s) => s.contains(e)) || (e.checkVisibility && !e.checkVisibility())) continue;
    if (e.readOnly || e.disabled) out.push(e.value);
  }
  return out.join('\\n');
}"""


def english_fragments() -> list[str]:
    """Sentence fragments (3+ words, one of them an English word) of the English texts that the Portuguese file does not
    have: what an untranslated text on the Portuguese page would show."""
    en, pt = i18n.strings("en"), i18n.strings("pt-BR")
    portuguese = "\n".join(pt.values()).lower()
    found: set[str] = set()
    for key, text in en.items():
        if pt.get(key) == text:
            continue
        plain = re.sub(r"\{[^}]*\}|`[^`]*`|https?://\S+|[*_#>]", "|", text)
        for part in re.split(r"[|.:;()!?\n·—,\[\]\"']", plain):
            words = re.findall(r"[A-Za-z][A-Za-z-]*", part)
            frag = " ".join(part.split()).lower()
            if len(words) >= 3 and {w.lower() for w in words} & ENGLISH and frag not in portuguese and frag not in ALLOW:
                found.add(frag)
    return sorted(found, key=len, reverse=True)


FRAGMENTS = english_fragments()


RAW_KEY = re.compile(r"__i18n__|translation_metadata")  # a gr.I18n shown as its raw key (gradio does not translate every place)


def english_on(page) -> list[str]:
    """The English fragments, Python values, hash prefixes and raw translation keys among the texts the page shows now."""
    text = page.evaluate(VISIBLE_TEXT_JS, SKIP_SELECTORS)
    low = " ".join(text.lower().split())
    found = [(f, m) for f in FRAGMENTS if (m := re.search(r"(?<![a-z])" + re.escape(f) + r"(?![a-z])", low))]
    bad = [f"{f!r} in '…{low[max(0, m.start() - 80):m.end() + 80]}…'" for f, m in found]  # where it shows, for the reader
    bad += [m.group(0) for m in PYTHON.finditer(text)] + [m.group(0) for m in HASHED.finditer(text)] + RAW_KEY.findall(text)
    return bad


def toast(page, contains: str) -> list[str]:
    """The lines of the toast that says `contains` (its title, then its message), once it shows."""
    item = page.locator(".toast-body").filter(has_text=contains).first
    item.wait_for(timeout=90_000)
    return [line.strip() for line in item.inner_text().splitlines() if line.strip() and line.strip() != "×"]


def close_toasts(page) -> None:
    for button in page.locator(".toast-close").all():
        if button.is_visible():
            button.click()
    page.locator(".toast-body").first.wait_for(state="detached", timeout=30_000)


class Traffic:
    """The page's calls to the app's API (POSTs under /gradio_api/): how many are under way, and those that ended."""

    def __init__(self, page) -> None:
        self.pending, self.ended = 0, []
        page.on("request", self._start)
        page.on("requestfinished", self._end)
        page.on("requestfailed", self._end)

    @staticmethod
    def _ours(req) -> bool:
        return req.method == "POST" and "/gradio_api/" in req.url

    def _start(self, req) -> None:
        self.pending += self._ours(req)

    def _end(self, req) -> None:
        if self._ours(req):
            self.pending -= 1
            self.ended.append(f"{req.url.split('/gradio_api/')[-1]} {(req.post_data or '')[:160]}")


def settle(page, traffic: Traffic, quiet_s: float = 1.0, limit_s: float = 90.0) -> None:
    """Wait until the page has had no call to the app under way for `quiet_s` (the updates a pick sets off, and the ones
    those set off, have all landed), at most `limit_s`: a slow, shared CPU answers them seconds late."""
    end, quiet_since = time.monotonic() + limit_s, None
    while time.monotonic() < end:
        if traffic.pending > 0:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        page.wait_for_timeout(100)  # lets Playwright deliver the request events


def accordion(page, panel: str, key: str) -> None:
    """Open the accordion of a panel whose title is the Portuguese text of `key`."""
    title = re.compile(r"^\s*" + re.escape(i18n.t(key, "pt-BR")) + r"\s*[▼▲]?\s*$")
    page.locator(f"#{panel}-panel button.label-wrap").filter(has_text=title).first.click()


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):
    runs = tmp_path_factory.mktemp("pt-runs")
    failed = runs / "falhou-nos-dados"
    failed.mkdir()
    from engine.runs import EventLog, save_config

    save_config(failed, config.TrainConfig(base_model="builtin:compact-mini", dataset="builtin:dates", run_name="falhou-nos-dados"))
    exc = DataError(key="error.data.empty", file="0123456789abcdef0123-notas.jsonl".split("-", 1)[1])
    events = EventLog(failed / "events.jsonl")
    events.write("start", run=failed.name, method="qlora", base_model="builtin:compact-mini", dataset="builtin:dates", resumed_from=None,
                 device="CPU", device_kind="cpu", dtype="float32")
    events.write("error", kind="engine", message=str(exc), i18n=json.loads(json.dumps(exc.to_record())))
    with running_app(runs) as demo:
        ctx = browser.new_context(viewport={"width": 1440, "height": 900}, locale="pt-BR")
        p = ctx.new_page()
        p.traffic = Traffic(p)  # read by settle()
        p.goto(demo.local_url)
        p.wait_for_function("() => { const e = document.getElementById('est-panel'); return !!e && /\\d\\s*GiB/.test(e.innerText); }", timeout=120_000)
        yield p
        ctx.close()


def test_the_fragments_are_english_only():
    assert len(FRAGMENTS) > 300
    assert "is not allowed" in FRAGMENTS and not [f for f in FRAGMENTS if f in "\n".join(i18n.strings("pt-BR").values()).lower()]


def test_estimator_in_portuguese(page):
    page.locator("#est-panel-button").click()
    # full fine-tuning on a 4 GB card does not fit: make-it-fit offers changes (one of them a combination of several)
    page.locator("#MemoryQuery-task input").click()
    page.get_by_role("option", name=i18n.t("text.choice.MemoryQuery.task.full", "pt-BR"), exact=True).click()  # the choice's name in Portuguese
    page.locator("#estimator-tier input").click()
    page.get_by_role("option", name=re.compile(r"\b4 GB\b")).first.click()
    page.locator("#estimator-fit").wait_for(state="visible", timeout=120_000)
    together = i18n.t("estimator.fit.together", "pt-BR").split("{")[0].strip()  # "Tudo junto:"
    page.wait_for_function("(t) => document.querySelector('#estimator-fit').innerText.includes(t)", arg=together, timeout=120_000)
    fit = page.locator("#estimator-fit").inner_text()
    assert "Tarefa: QLoRA" in fit and "task=" not in fit, fit  # the changes in words, not optimizer=adamw-8bit, task=qlora
    assert english_on(page) == []


def test_the_data_check_and_the_method_list_in_portuguese(page):
    """The data check's tables appear with their results, headers in Portuguese (never a raw translation key); the
    method list names DPO, ORPO and GRPO and says under the field what the picked one needs and does (issue 32)."""
    page.locator("#ft-panel-button").click()
    accordion(page, "ft", "finetune.acc.check")
    assert not page.locator("#finetune-check-rows").is_visible()  # no empty table before the check has run
    assert english_on(page) == []
    page.get_by_role("button", name=i18n.t("finetune.check.button", "pt-BR"), exact=True).click()
    rows = page.locator("#finetune-check-rows")
    rows.wait_for(state="visible", timeout=120_000)
    headers = {h.strip() for h in rows.locator("th").all_inner_texts()} - {""}
    assert {i18n.t(f"finetune.check.col.{c}", "pt-BR") for c in ("row", "text", "tokens", "trained")} <= headers, headers
    assert english_on(page) == []

    method = page.locator("#TrainConfig-method")
    method.locator("input").click()
    names = [o.strip() for o in page.get_by_role("option").all_inner_texts()]
    for m in ("dpo", "orpo", "grpo"):
        assert i18n.t(f"text.choice.TrainConfig.method.{m}", "pt-BR") in names, names  # named, not the bare value
    page.get_by_role("option", name=i18n.t("text.choice.TrainConfig.method.grpo", "pt-BR"), exact=True).click()
    method.get_by_text(i18n.t("method_help.grpo", "pt-BR")[:40]).wait_for(timeout=60_000)  # what GRPO needs and does
    # and its measured settings have landed (a separate event: arriving after the next test filled the learning rate,
    # they would overwrite it, and the next test's Start would then be valid and train instead of refusing)
    page.wait_for_function("(v) => { const e = document.querySelector('#TrainConfig-max_steps input'); return e && e.value === v; }",
                           arg=str(METHOD_DEFAULTS["grpo"]["max_steps"]), timeout=90_000)
    assert english_on(page) == []
    method.locator("input").click()
    page.get_by_role("option", name=i18n.t("text.choice.TrainConfig.method.full", "pt-BR"), exact=True).click()
    method.get_by_text(i18n.t("method_help.full", "pt-BR")[:40]).wait_for(timeout=60_000)
    accordion(page, "ft", "finetune.acc.check")  # closed again, as the next step expects it


def test_an_unreadable_number_and_an_empty_upload_in_portuguese(page, tmp_path):
    page.locator("#ft-panel-button").click()
    accordion(page, "ft", "finetune.acc.training")
    rate = page.locator("#TrainConfig-learning_rate input")
    # CI (a busy 2-core box) saw the emptied field filled again before Start, three landings running, never on a quiet
    # machine: a late update from the method picks of the step before. The field is emptied once the page's calls have
    # all landed and is checked after its own change has; a refill is said with the calls that came in meanwhile
    refills = []
    for _ in range(3):
        settle(page, page.traffic)
        seen = len(page.traffic.ended)
        rate.fill("")  # an emptied decimal field (ui/widgets.py decimal_box): Start sends ""
        rate.press("Tab")  # the field's change is sent before Start's click reads the form
        settle(page, page.traffic)
        if rate.input_value() == "":
            break
        refills.append(f"refilled with {rate.input_value()!r} after the calls {page.traffic.ended[seen:]!r}")
    else:
        pytest.fail("the emptied learning rate was filled again each time: " + "; ".join(refills))
    if refills:
        warnings.warn("test_browser_portuguese: " + "; ".join(refills), stacklevel=1)
    page.locator("#finetune-start").click()
    try:
        lines = toast(page, "learning_rate")
    except playwright_api.TimeoutError:  # say what the page showed instead, for the next person to read
        pytest.fail(f"no toast naming learning_rate; the field holds {rate.input_value()!r}, the toasts say "
                    f"{page.locator('.toast-body').all_inner_texts()!r}, the run's status {page.locator('#finetune-status').inner_text()[:500]!r}")
    assert lines == ["Erro", "Taxa de aprendizado (learning_rate): um número é obrigatório."]
    assert english_on(page) == []
    close_toasts(page)
    rate.fill("0.0002")

    empty = tmp_path / "notas.jsonl"
    empty.write_bytes(b"")
    page.locator("#finetune-upload input[type=file]").set_input_files(str(empty))
    page.locator("#finetune-upload").get_by_text("notas.jsonl").first.wait_for(timeout=60_000)
    accordion(page, "ft", "finetune.acc.check")
    page.get_by_role("button", name=i18n.t("finetune.check.button", "pt-BR"), exact=True).click()
    # the toast's title in Portuguese, and the file's own name (not the name it is kept under)
    assert toast(page, "notas.jsonl") == ["Erro", "notas.jsonl está vazio (0 bytes)."]
    assert english_on(page) == []
    close_toasts(page)


def test_a_failed_runs_error_in_portuguese(page):
    page.locator("#ft-panel-button").click()
    close_toasts(page)  # a toast left from an earlier step may sit over the picker
    page.keyboard.press("Escape")  # and so may a dropdown list still open
    pick = page.locator("#finetune-run-pick input")
    pick.scroll_into_view_if_needed()
    pick.click(timeout=60_000)
    page.get_by_role("option", name="falhou-nos-dados").first.click()
    page.locator("#finetune-status").get_by_text("notas.jsonl está vazio (0 bytes).").wait_for(timeout=60_000)
    assert english_on(page) == []


def test_the_onnx_check_in_portuguese(page):
    """The ONNX check's rows are sentences in Portuguese with yes/no and numbers for people, not variable names."""
    from engine.export.onnx import missing_packages

    if missing_packages():
        pytest.skip("the optional ONNX packages (requirements-onnx.txt) are not installed")
    page.locator("#pg-panel-button").click()
    page.get_by_role("tab", name=i18n.t("playground.export.tab", "pt-BR")).click()
    page.locator("#playground-onnx-btn").click()
    label = i18n.t("onnx_check.greedy_equal", "pt-BR")
    page.locator("#pg-panel").get_by_text(label).locator("visible=true").first.wait_for(timeout=240_000)
    text = page.locator("#pg-panel").inner_text()
    assert "greedy_equal" not in text and "tokens_per_s" not in text and "max_abs" not in text
    assert i18n.t("onnx_check.onnx_tokens_per_s", "pt-BR") in text and i18n.t("onnx_check.yes", "pt-BR") in text
    assert english_on(page) == []
    page.get_by_role("tab", name=i18n.t("playground.chat.tab", "pt-BR")).click()  # back where the next step starts


def test_playground_chat_and_batch_in_portuguese(page):
    page.locator("#pg-panel-button").click()
    prompt = page.locator("#playground-prompt textarea")
    playwright_api.expect(prompt).not_to_have_value("", timeout=60_000)
    page.locator("#playground-send").click()
    page.locator("#playground-stats").get_by_text("fim:").wait_for(timeout=180_000)
    assert english_on(page) == []

    page.get_by_role("tab", name=i18n.t("playground.batch.tab", "pt-BR")).click()
    page.get_by_label(i18n.t("playground.batch.text", "pt-BR")).fill("Olá\nQual é a capital do Brasil?")
    page.get_by_role("button", name=i18n.t("playground.batch.btn", "pt-BR"), exact=True).click()
    done = i18n.t("playground.batch.done", "pt-BR")
    page.locator("#playground-batch-status").get_by_text(done).wait_for(timeout=180_000)
    headers = page.locator("#pg-panel th").all_inner_texts()
    assert {"resposta", "segundos"} <= {h.strip() for h in headers}
    assert english_on(page) == []


def test_the_check_sees_english_on_the_page(page):
    """The check itself: an English message, a Python value and a hash prefix shown on the page are found."""
    shown = "Max steps (max_steps) = None is not allowed: a whole number. 0123456789abcdef0123-notas.jsonl"
    page.evaluate("(t) => { const d = document.createElement('div'); d.id = 'planted'; d.textContent = t; document.body.prepend(d); }", shown)
    try:
        found = english_on(page)
        assert any(f.startswith("'is not allowed' in") for f in found) and "None" in found and "0123456789abcdef0123-" in found, found
    finally:
        page.evaluate("() => document.getElementById('planted').remove()")
