"""The estimator's texts for people (notes, names and explanations of the memory terms, make-it-fit advice and its
costs, card names, error messages) in any language of the interface, while every result still reads as English.

A `Msg` is a `str` (its English text: what the CLI, the JSON results, logs and tests see) that also keeps its
language-file key and parameters, so the web page can show it in the visitor's language (`render(text, lang)`).
Numbers in its parameters are written for people in each language (engine/i18n.py `fmt_number`). The keys live in
the `estimator.*` section of presets/lang/*.yaml.
"""

from __future__ import annotations

import re
from typing import Any

from .. import i18n
from ..errors import ConfigError, ModelLoadError


def _param(value: Any, lang: str) -> Any:
    if isinstance(value, Msg):
        return value.render(lang)
    if isinstance(value, (list, tuple)):  # several texts in one sentence: "a; b; c"
        return "; ".join(str(_param(v, lang)) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 100:
        return i18n.fmt_number(int(value), lang)
    text = f"{value:,.2f}".removesuffix("0") if abs(value) < 100 else f"{value:,.1f}"  # 13.30 -> 13.3, 3.00 -> 3.0, 2.89
    return text.translate(str.maketrans(",.", ".,")) if i18n.norm_lang(lang) == "pt-BR" else text


def _fill(key: str, lang: str, params: dict[str, Any]) -> str:
    return i18n.t(key, lang, **{k: _param(v, lang) for k, v in params.items()})


class Msg(str):
    """A text with its language key: `str(msg)` is the English text, `msg.render("pt-BR")` the Portuguese one."""

    key: str
    params: dict[str, Any]

    def __new__(cls, key: str, /, **params: Any) -> Msg:
        self = super().__new__(cls, _fill(key, i18n.DEFAULT, params))
        self.key, self.params = key, params
        return self

    def render(self, lang: str) -> str:
        """The text in `lang` ("en" or "pt-BR")."""
        return _fill(self.key, lang, self.params)


def render(text: Any, lang: str) -> str:
    """A Msg in `lang`; any other text as it is."""
    return text.render(lang) if isinstance(text, Msg) else str(text)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def term_name(term: str, lang: str) -> str:
    """The name of a memory term ("weights", "KV cache"...) in `lang`."""
    return i18n.t(f"estimator.term.{_slug(term)}.name", lang) if f"estimator.term.{_slug(term)}.name" in i18n.strings(lang) else term


def term_what(term: str, lang: str) -> str:
    """One short sentence: what a memory term is."""
    return i18n.t(f"estimator.term.{_slug(term)}.what", lang)


def tier_name(tier: Any, lang: str) -> str:
    """A card's short human name ("NVIDIA T4 · 16 GB (Colab, Kaggle)"): its `estimator.tier.<name>` text, else the
    label of presets/hardware.yaml (a tier added there without a translation still shows a name, never an id)."""
    key = f"estimator.tier.{tier.name}"
    return i18n.t(key, lang) if key in i18n.strings(lang) else tier.label


def tier_msg(tier: Any) -> str:
    """The card's name as a Msg (rendered in each language) when the language files name it, else its label."""
    return Msg(f"estimator.tier.{tier.name}") if f"estimator.tier.{tier.name}" in i18n.strings(i18n.DEFAULT) else tier.label


class KeyedConfigError(ConfigError):
    """A ConfigError whose "what is allowed" part has its own key, so that the whole message is translated."""

    def __init__(self, field: str, value: Any, allowed: Msg) -> None:
        self.allowed_msg = allowed  # before ConfigError's __init__, which renders the message once for the CLI
        super().__init__(field, value, str(allowed))

    def allowed_text(self, lang: str) -> str:
        return self.allowed_msg.render(lang)


def model_error(key: str, /, **params: Any) -> ModelLoadError:
    """A ModelLoadError with a language key (`estimator.error.*`)."""
    return ModelLoadError(key=key, **params)


def change_msg(name: str, value: Any) -> Msg:
    """One change of a suggestion in words ("Optimizer: adamw-8bit", "Task: QLoRA", "Double quant: on"), never
    `task=qlora`: the field's label and the value's name where the language files have them."""
    if isinstance(value, bool):
        shown: Any = Msg(f"text.value.{str(value).lower()}")
    elif f"text.choice.MemoryQuery.{name}.{value}" in i18n.strings(i18n.DEFAULT):
        shown = Msg(f"text.choice.MemoryQuery.{name}.{value}")
    else:
        shown = value
    label = f"field.MemoryQuery.{name}.label"
    return Msg("text.fit_change", field=Msg(label) if label in i18n.strings(i18n.DEFAULT) else name, value=shown)
