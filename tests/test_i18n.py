"""The page speaks Portuguese and English: every key in both language files, no text in the page (app.py, ui/) that bypasses them,
placeholders that match, and the server-side rendering of messages in the visitor's language (engine/i18n.py)."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from engine import config, i18n  # noqa: F401 - importing config registers the fields' English texts
from engine.errors import ConfigError, EngineError

ROOT = Path(__file__).resolve().parent.parent
PAGE = [ROOT / "app.py", *sorted((ROOT / "ui").glob("*.py"))]  # the entry and the page's modules

# Keyword arguments of gradio components that a person reads.
TEXT_KWARGS = {"label", "info", "placeholder", "title", "value", "headers", "x_title", "y_title", "description", "button_text"}
# Components and calls whose first positional argument is read text.
TEXT_FIRST_ARG = {"Markdown", "Button", "Tab", "Accordion", "Info", "Warning", "Error", "HTML", "DownloadButton", "UploadButton", "Checkbox"}
ALLOWED = {"Compact LLM Lab", "Português", "English"}  # names, the same in every language


def _placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_every_key_exists_in_both_languages():
    en, pt = set(i18n.strings("en")), set(i18n.strings("pt-BR"))
    assert sorted(en - pt) == [], "keys without a Portuguese text"
    assert sorted(pt - en) == [], "Portuguese keys without an English text"


def test_placeholders_match():
    en, pt = i18n.strings("en"), i18n.strings("pt-BR")
    wrong = {k: (_placeholders(en[k]), _placeholders(pt[k])) for k in en.keys() & pt.keys() if _placeholders(en[k]) != _placeholders(pt[k])}
    assert wrong == {}


def test_no_empty_texts():
    for lang in i18n.LANGS:
        assert [k for k, v in i18n.strings(lang).items() if not v.strip()] == [], lang


def _is_text(node: ast.AST) -> bool:
    """A literal a person would read (letters in it), not a key lookup T("...") / tr("...")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(re.search(r"[A-Za-zÀ-ÿ]{2}", node.value)) and node.value not in ALLOWED
    if isinstance(node, ast.JoinedStr):
        return any(_is_text(v) for v in node.values if isinstance(v, ast.Constant))
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_text(e) for e in node.elts)
    if isinstance(node, ast.IfExp):
        return _is_text(node.body) or _is_text(node.orelse)
    return False


def app_text_violations() -> list[str]:
    """`file: function: line: gr.X(...)` for each gradio call of the page that shows a literal text instead of a language key."""
    out: list[str] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "gr":
            name = node.func.attr
            if name != "Blocks":
                bad = [kw.arg for kw in node.keywords if kw.arg in TEXT_KWARGS and _is_text(kw.value)]
                if name in TEXT_FIRST_ARG and node.args and _is_text(node.args[0]):
                    bad.append("text")
                if bad:
                    out.append(f"{where}: {node.lineno}: gr.{name}({', '.join(bad)})")
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    for path in PAGE:
        visit(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(ROOT).as_posix())
    return out


def test_app_texts_come_from_the_language_files():
    assert app_text_violations() == []


def test_app_keys_exist():
    """Every T("key") / tr("key") in the page names a key of the language files."""
    keys = set(i18n.strings("en"))
    used = {k for path in PAGE for k in re.findall(r"""\b(?:T|tr)\(\s*["']([a-z_][\w.]*)["']""", path.read_text(encoding="utf-8"))}
    assert sorted(used - keys) == []


@pytest.mark.parametrize("tag, lang", [("pt-BR", "pt-BR"), ("pt", "pt-BR"), ("pt_PT.UTF-8", "pt-BR"), ("en-US", "en"), ("de", "en"), (None, "en")])
def test_norm_lang(tag, lang):
    assert i18n.norm_lang(tag) == lang


def test_language_of_a_request():
    assert i18n.lang_from_headers({"cookie": "a=1; lab_lang=pt-BR", "accept-language": "en-US"}) == "pt-BR"
    assert i18n.lang_from_headers({"accept-language": "pt-BR,pt;q=0.9,en;q=0.8"}) == "pt-BR"
    assert i18n.lang_from_headers({"accept-language": "en-GB"}) == "en"
    assert i18n.lang_from_headers(None) == "en"


def test_engine_errors_render_in_the_visitors_language(monkeypatch):
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    exc = ConfigError("max_steps", "x", "a number")
    assert str(exc) == "max_steps = 'x' is not allowed: a number."
    assert "não é permitido" in exc.render("pt-BR")
    assert EngineError("plain text").render("pt-BR") == "plain text"  # a message without a key is shown as is


def test_cli_follows_lang(monkeypatch):
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    monkeypatch.setenv("LANG", "pt_BR.UTF-8")
    assert i18n.cli_lang() == "pt-BR"
    assert "não é permitido" in str(ConfigError("lr", -1, "a positive number"))


def test_numbers_for_people():
    assert i18n.fmt_number(1048576) == "1,048,576"
    assert i18n.fmt_number(1048576, "pt-BR") == "1.048.576"
    assert i18n.fmt_number(0.05, "pt-BR") == "0,05"
    assert i18n.fmt_number(2.0**31) == "2,147,483,648"


def test_missing_key_shows_the_key_never_breaks():
    assert i18n.t("no.such.key", "pt-BR") == "no.such.key"
    assert "não é permitido" in i18n.t("message.config_error", "pt-BR", field="x")  # a missing parameter leaves its slot
