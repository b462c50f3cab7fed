"""Languages of the interface: English and Brazilian Portuguese, as data.

Every text a person reads in the web page lives in one language file per language (`presets/lang/en.yaml`,
`presets/lang/pt-BR.yaml`): nested YAML sections flattened to dotted keys (`finetune.start`). The English help and
label of a config field stay in the field's metadata (engine/config.py, once); its `field.<Class>.<name>.label|help`
keys for English are generated from it (`register_fields`), and the Portuguese file translates them.

Static texts (labels, info lines, tabs, buttons, fixed markdown) are translated in the browser by gradio's `gr.I18n`
(ui/language.py hands it `translations()`); texts built on the server (status lines, tables, verdicts, error messages) are
rendered here with `t(key, lang, **params)` in the visitor's language (`lang_of` reads the page's language cookie or the
browser's Accept-Language). Engine errors carry a key and parameters (`EngineError(key=..., **params)`), so the UI shows
them in the visitor's language while the CLI prints English (or Portuguese when `LANG` says so: `cli_lang`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

LANG_DIR = Path(__file__).resolve().parent.parent / "presets" / "lang"
LANGS = ("en", "pt-BR")
DEFAULT = "en"
COOKIE = "lab_lang"  # set by the page's language switch (ui/language.py) so that the server renders in the same language


def norm_lang(tag: str | None) -> str:
    """"pt", "pt-BR", "pt_PT.UTF-8"... -> "pt-BR"; anything else (or nothing) -> "en"."""
    return "pt-BR" if (tag or "").strip().lower().startswith("pt") else DEFAULT


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = "" if value is None else str(value)
    return flat


@functools.cache
def file_strings(lang: str) -> dict[str, str]:
    """The keys and texts of one language file, flattened (`section.sub.key` -> text)."""
    path = LANG_DIR / f"{lang}.yaml"
    return _flatten(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


@functools.cache
def strings(lang: str) -> dict[str, str]:
    """Every text of a language file (the English fields' texts are added by `register_fields`)."""
    lang = norm_lang(lang)
    return {**_FIELDS, **file_strings(lang)} if lang == DEFAULT else file_strings(lang)


_FIELDS: dict[str, str] = {}


def register_fields(texts: Mapping[str, str]) -> None:
    """Add the English `field.<Class>.<name>.label|help` texts read from the config dataclasses' metadata (engine/config.py
    calls this once at import: the metadata is their single English source)."""
    _FIELDS.update(texts)
    strings.cache_clear()


def t(key: str, lang: str | None = DEFAULT, /, **params: Any) -> str:
    """The text of `key` in `lang` with its `{placeholders}` filled; English when the language lacks it; the key itself
    when no language has it (a missing translation shows, it never breaks a page)."""
    text = strings(norm_lang(lang)).get(key)
    if text is None:
        text = strings(DEFAULT).get(key, key)
    if not params:
        return text
    try:
        return text.format(**params)
    except (KeyError, IndexError, ValueError):
        return text


def translations() -> dict[str, dict[str, str]]:
    """What gr.I18n needs: every key in each locale the browser may announce (`pt` and `pt-BR` alike)."""
    pt = {**strings(DEFAULT), **strings("pt-BR")}  # a key not yet translated shows in English rather than as a key
    return {"en": strings(DEFAULT), "pt": pt, "pt-BR": pt}


def lang_from_headers(headers: Mapping[str, str] | None) -> str:
    """The visitor's language from a request's headers: the page's language cookie, else the first Accept-Language tag."""
    headers = headers or {}
    for part in (headers.get("cookie") or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return norm_lang(value)
    accept = (headers.get("accept-language") or "").split(",")[0].split(";")[0]
    return norm_lang(accept)


def cli_lang() -> str:
    """The command line's language: Portuguese when LC_ALL, LC_MESSAGES or LANG says so (pt_BR.UTF-8), else English."""
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if os.environ.get(var):
            return norm_lang(os.environ[var])
    return DEFAULT


def fmt_number(value: float, lang: str = DEFAULT, digits: int = 2) -> str:
    """A number for people: 1,048,576 / 1.048.576, 0.05 / 0,05, 2.1e9 -> 2,147,483,648 (never 1.04858e+06)."""
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        text = f"{int(value):,}"
    else:
        text = f"{value:,.{digits}f}"
    if norm_lang(lang) == "pt-BR":  # 1,234.5 -> 1.234,5
        text = text.replace(",", "\0").replace(".", ",").replace("\0", ".")
    return text
