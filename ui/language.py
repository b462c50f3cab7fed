"""The page's two languages: static texts translated in the browser (gr.I18n), server-built texts in the visitor's language,
and the Português | English switch (presets/lang/*.yaml hold the words)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from engine import i18n

I18N = gr.I18n(**i18n.translations())


T = I18N  # T("finetune.tab"): a static text, translated by the browser (presets/lang/*.yaml)


# The language: the browser's (gradio's gr.I18n follows navigator.language) unless the page's switch chose one (kept in
# local storage, applied at load through gradio's own changeLocale). A cookie tells the server (lang_of), so texts built
# there (statuses, tables, errors) come in the same language.
LANG_HEAD = r"""<script>
(() => {
  let l = null;
  try { l = localStorage.getItem("@COOKIE@"); } catch (e) {}
  const eff = (l || navigator.language || "en").toLowerCase().startsWith("pt") ? "pt-BR" : "en";
  document.cookie = "@COOKIE@=" + eff + "; path=/; max-age=31536000; SameSite=Lax";
  window.labSetLocale = async (lang) => {
    const url = performance.getEntriesByType("resource").map((e) => e.name).find((n) => /\/assets\/core-[^/]*\.js$/.test(n));
    if (url) { try { (await import(url)).changeLocale(lang); } catch (e) {} }
  };
  if (l) window.labSetLocale(l);  // gradio runs this head before it mounts the page: labels come in the chosen language
})();
</script>""".replace("@COOKIE@", i18n.COOKIE)


LANG_SWITCH_JS = """(l) => {
  try { localStorage.setItem("@COOKIE@", l); } catch (e) {}
  document.cookie = "@COOKIE@=" + l + "; path=/; max-age=31536000; SameSite=Lax";
  location.reload();
  return l;
}""".replace("@COOKIE@", i18n.COOKIE)


LANG_NOW_JS = """async () => {
  let saved = null;
  try { saved = localStorage.getItem("@COOKIE@"); } catch (e) {}
  if (saved && window.labSetLocale) await window.labSetLocale(saved);
  const l = saved || navigator.language || "en";
  return l.toLowerCase().startsWith("pt") ? "pt-BR" : "en";
}""".replace("@COOKIE@", i18n.COOKIE)


def lang_of(request: gr.Request | None = None) -> str:
    """The visitor's language ("en" or "pt-BR"): the page's language cookie, else the browser's Accept-Language. Without
    a request argument, the one of the event being handled (gradio keeps it in a context variable)."""
    if request is None:
        from gradio.context import LocalContext

        request = LocalContext.request.get(None)
    return i18n.lang_from_headers(getattr(request, "headers", None))


def tr(key: str, /, **params: Any) -> str:
    """A server-built text in the visitor's language (status lines, messages, table headers)."""
    return i18n.t(key, lang_of(), **params)


def language_switch() -> gr.Radio:
    """Português | English, at the top of the page: reloads the page in the chosen language (kept in the browser)."""
    switch = gr.Radio(choices=[("Português", "pt-BR"), ("English", "en")], value=None, label=T("app.language"), show_label=False,
                      container=False, elem_id="lang-switch")
    switch.input(None, [switch], [switch], js=LANG_SWITCH_JS)
    return switch
