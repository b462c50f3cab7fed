"""User-facing errors of the engine.

Every failure a person can cause or fix (a bad form value, a malformed file, an unknown model id, a card
that is too small) is raised as an `EngineError` whose message is written for that person: what was
wrong, the value, and what is allowed or what to do. The UI shows the message as is (`gr.Error`), the CLI
prints it without a traceback. Programming errors stay ordinary exceptions.
"""

from __future__ import annotations

import math
from typing import Any

from . import i18n


class EngineError(Exception):
    """Base class: the message is meant for the end user.

    Raised with a language-file key and its parameters (`EngineError(key="message.x", name=...)`), the message is
    rendered in the visitor's language by the UI (`render(lang)`) and in the command line's language by `str()`; raised
    with a plain text, that text is shown as is."""

    def __init__(self, message: str = "", *, key: str | None = None, **params: Any) -> None:
        self.key, self.params = key, params
        super().__init__(message or (self.render(i18n.cli_lang()) if key else ""))

    def render(self, lang: str) -> str:
        """The message in `lang` ("en" or "pt-BR"); numbers and lists among the parameters written for people there
        (1,048,576 / 1.048.576)."""
        if not self.key:
            return str(self)
        return i18n.t(self.key, lang, **{k: for_people(v, lang) for k, v in self.params.items()})

    def to_record(self) -> dict[str, Any] | None:
        """The message's key and parameters as JSON (written into a run's events.jsonl), so a page can show it later in its
        own visitor's language (`render_record`); None for a message without a key."""
        return {"key": self.key, "params": {k: to_json(v) for k, v in self.params.items()}} if self.key else None


def to_json(value: Any) -> Any:
    """A parameter as JSON (a Phrase keeps its key and parameters, to be rendered later in a reader's language)."""
    if isinstance(value, Phrase):
        return {"phrase": value.key, "params": {k: to_json(v) for k, v in value.params.items()}}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def from_json(value: Any) -> Any:
    """A parameter read back from `to_json`'s JSON."""
    if isinstance(value, dict) and "phrase" in value:
        return Phrase(value["phrase"], **{k: from_json(v) for k, v in (value.get("params") or {}).items()})
    return value


def render_record(record: Any, text: str, lang: str) -> str:
    """A message written by `EngineError.to_record` (an event of a run) in `lang`; `text` (the message as written, in the
    command line's language) when there is no record or it cannot be read."""
    if not isinstance(record, dict):
        return text
    try:
        if "config" in record:
            c = record["config"]
            return ConfigError(c["field"], c.get("value"), c.get("allowed") or "", allowed_key=c.get("allowed_key"), owner=c.get("owner"),
                               **{k: from_json(v) for k, v in (c.get("allowed_params") or {}).items()}).render(lang)
        return EngineError(text or record["key"], key=record["key"], **{k: from_json(v) for k, v in (record.get("params") or {}).items()}).render(lang)
    except (KeyError, TypeError, AttributeError):  # a record from another version of the app: the text as written
        return text


class ConfigError(EngineError):
    """A configuration value is not allowed. Names the field, the value and what is allowed.

    `allowed` is a plain text (shown as is in every language), or `allowed_key` names a language-file text
    (`message.allowed.range`) whose placeholders are `allowed_params` (numbers are written for people in the reader's
    language: 1,048,576 / 1.048.576). With `owner` (the form's dataclass, e.g. "TrainConfig") the UI also names the
    field by its label in the visitor's language: "Max steps (max_steps) = -1 ..."; the CLI names it by its field name."""

    def __init__(self, field: str, value: Any, allowed: str = "", *, allowed_key: str | None = None, owner: str | None = None,
                 **allowed_params: Any) -> None:
        self.field, self.value, self.owner = field, value, owner
        self.allowed_key, self.allowed_params, self.plain_allowed = allowed_key, allowed_params, allowed
        lang = i18n.cli_lang()
        self.allowed = self.allowed_text(lang)  # what is allowed, as text (the CLI's language)
        super().__init__(self.render(lang, label=False), key="message.config_error", field=field, value=repr(value), allowed=self.allowed)

    @classmethod
    def of(cls, field: str, value: Any, allowed: str, owner: str | None = None, **params: Any) -> ConfigError:
        """Shorthand: what is allowed is the language files' `message.allowed.<allowed>` filled with `params`."""
        return cls(field, value, allowed_key=f"message.allowed.{allowed}", owner=owner, **params)

    def allowed_text(self, lang: str) -> str:
        """What is allowed, in `lang`."""
        if not self.allowed_key:
            return self.plain_allowed
        return i18n.t(self.allowed_key, lang, **{k: for_people(v, lang) for k, v in self.allowed_params.items()})

    def label_key(self) -> str | None:
        """The language-file key of the field's label, when the field belongs to a form (`owner`) that has one."""
        key = f"field.{self.owner}.{self.field}.label"
        return key if self.owner and key in i18n.strings(i18n.DEFAULT) else None

    def to_record(self) -> dict[str, Any]:
        return {"config": {"field": self.field, "value": to_json(self.value), "allowed": self.plain_allowed, "allowed_key": self.allowed_key,
                           "owner": self.owner, "allowed_params": {k: to_json(v) for k, v in self.allowed_params.items()}}}

    def renamed(self, field: str, owner: str | None) -> ConfigError:
        """The same error for a field seen from an enclosing form (`r` of LoraSettings is `lora.r` of TrainConfig)."""
        return ConfigError(field, self.value, self.plain_allowed, allowed_key=self.allowed_key, owner=owner, **self.allowed_params)

    def render(self, lang: str, *, label: bool = True) -> str:
        """The message in `lang`, the field named by its label there when it has one (and `label`)."""
        name = self.field
        if label and (key := self.label_key()):
            name = i18n.t("message.field_label", lang, label=i18n.t(key, lang), name=self.field)
        if self.value is None or (isinstance(self.value, str) and not self.value.strip()):
            # an empty field (or a number gradio could not read, which it hands over as None): what is required, no value
            return i18n.t("error.config_missing", lang, field=name, allowed=self.allowed_text(lang))
        return i18n.t("message.config_error", lang, field=name, value=for_people(self.value, lang, quote=True), allowed=self.allowed_text(lang))


class Phrase(str):
    """A language-file text with its parameters: a parameter of a keyed message ("line" / "linha") or a reason kept in
    a report (why a row was dropped). As a `str` it is the English text (logs, JSON, events.jsonl); `render(lang)` writes
    it in the reader's language."""

    key: str
    params: dict[str, Any]

    def __new__(cls, key: str, /, **params: Any) -> Phrase:
        self = super().__new__(cls, i18n.t(key, i18n.DEFAULT, **{k: for_people(v, i18n.DEFAULT) for k, v in params.items()}))
        self.key, self.params = key, params
        return self

    def render(self, lang: str) -> str:
        return i18n.t(self.key, lang, **{k: for_people(v, lang) for k, v in self.params.items()})


def dropped_reasons(dropped: list[tuple[int, Any]], unit: str, n: int = 5) -> list[Phrase]:
    """The first `n` dropped rows as "line 3: empty 'output'" in any language (a DataError's `reasons`, a data report)."""
    return [Phrase("text.dropped_row", unit=Phrase(f"text.unit_label.{unit}"), n=number, why=why) for number, why in dropped[:n]]


def for_people(value: Any, lang: str, *, quote: bool = False) -> str:
    """A value as a person reads it in `lang`: numbers grouped and with the language's decimal mark (2,147,483,647 /
    0,0001; never 2.14748e+09), lists as "a, b, c", true/false and "(empty)" in words; other values as text (`quote`:
    in quotes, 'lots'). Never a Python spelling (None, True, ['a'])."""
    if isinstance(value, Phrase):
        return value.render(lang)
    if value is None:
        return i18n.t("text.value.empty", lang)
    if isinstance(value, bool):
        return i18n.t(f"text.value.{str(value).lower()}", lang)
    if isinstance(value, int):
        return i18n.fmt_number(value, lang)
    if isinstance(value, float) and math.isfinite(value):
        if value.is_integer():
            return i18n.fmt_number(int(value), lang)
        decimals = len(f"{abs(value):.12f}".rstrip("0").partition(".")[2])
        # smaller than 1e-12 has no readable fixed form; shown as typed
        return i18n.fmt_number(value, lang, digits=decimals) if decimals else repr(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(for_people(v, lang, quote=quote) for v in value) or i18n.t("text.value.empty", lang)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {for_people(v, lang, quote=quote)}" for k, v in value.items()) or i18n.t("text.value.empty", lang)
    if isinstance(value, str) and quote:  # a value someone typed: quoted, line breaks shown as \n, a pasted page not repeated in full
        return repr(value if len(value) <= 80 else value[:77] + "...")
    if isinstance(value, str):
        return value
    return type(value).__name__ if quote else str(value)  # an object's repr means nothing to a person


class DataError(EngineError):
    """A dataset cannot be read or used (empty, malformed, wrong columns, wrong encoding...)."""


class ModelLoadError(EngineError):
    """A model or tokenizer cannot be found or loaded (unknown id, offline, remote code, bad folder)."""


class JobError(EngineError):
    """A training job cannot be started, stopped or resumed in the requested way."""


class TrainingDiverged(EngineError):
    """The training or eval loss became NaN or infinite: the run ends (as failed) with advice instead of going on."""

    kind = "nan"  # the `error` event's kind (engine/cli.py), so the UI can tell it from a crash or an OOM


class RunStopped(JobError):
    """A run's Stop was honoured before training proper began (e.g. while the built-in base was being pretrained):
    the run ends as stopped (resumable), not failed."""


class GenerationError(EngineError):
    """A generation request cannot be served (empty prompt, model not loaded...)."""


class HubError(EngineError):
    """A push to the Hugging Face Hub cannot be done or failed (no token, offline, no write access...).
    Messages never contain the token."""
