"""The playground in headless Chromium (Playwright), in English and in Portuguese: it opens with a real example prompt,
generates, an error shows beside the prompt and keeps the conversation and the prompt, and the greedy preset visibly
switches the sampling sliders off."""

from __future__ import annotations

import pytest
from conftest import CHROMIUM

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); .ci/run installs it")

TEXTS = {  # what a person reads, per language
    "en": {"tab": "Playground", "send": "Generate", "example": "Explain in two sentences what a language model is.", "error": "no run named 'ghost'",
           "greedy": "precise (greedy)", "sampling": "Sampling settings beyond the preset",
           "ended": "ended:"},
    "pt-BR": {"tab": "Playground", "send": "Gerar", "example": "Explique em duas frases o que é um modelo de linguagem.",
              "error": "Não existe execução chamada 'ghost'", "greedy": "preciso (greedy)", "sampling": "Ajustes de amostragem além do modo",
              "ended": "fim:"},
}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    import app

    demo = app.build_app(tmp_path_factory.mktemp("playground-browser"))  # no finished run: the built-in model is the default
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True, **app.launch_options())
    yield demo.local_url
    demo.close()


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_an_error_beside_the_prompt_keeps_the_conversation(browser, url, lang):
    text = TEXTS[lang]
    context = browser.new_context(locale=lang, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(url)
        page.get_by_role("tab", name=text["tab"]).click()
        prompt = page.locator("#playground-prompt textarea")
        playwright_api.expect(prompt).to_have_value(text["example"], timeout=30_000)  # the example is the value, not a placeholder
        page.get_by_role("button", name=text["send"], exact=True).click()
        # the stats show tokens/s while the answer streams: wait for the line that says why it ended
        page.locator("#playground-stats").get_by_text(text["ended"]).wait_for(timeout=120_000)
        answer = page.locator("#playground-chat").inner_text()

        model = page.locator("#playground-model input")
        model.fill("run:ghost")
        model.press("Enter")
        page.wait_for_timeout(2000)  # picking a model fills its example prompt: type after that, as a person would
        prompt.fill("second question")
        page.get_by_role("button", name=text["send"], exact=True).click()
        page.locator("#playground-notice").get_by_text(text["error"]).wait_for(timeout=60_000)
        playwright_api.expect(prompt).to_have_value("second question")
        assert page.locator("#playground-chat").inner_text() == answer  # the conversation is still there
        assert page.locator("#playground-chat").get_by_text("Error", exact=True).count() == 0

        page.get_by_text(text["greedy"], exact=True).click()
        page.get_by_text(text["sampling"]).click()  # open the accordion
        temperature = page.locator("#GenerationSettings-temperature input[type=number]")
        playwright_api.expect(temperature).to_be_disabled(timeout=10_000)
        page.locator("#playground-greedy-note").wait_for(timeout=10_000)  # and it says why
    finally:
        context.close()
