"""User-facing errors of the engine.

Every failure a person can cause or fix (a bad form value, a malformed file, an unknown model id, a card
that is too small) is raised as an `EngineError` whose message is written for that person: what was
wrong, the value, and what is allowed or what to do. The UI shows the message as is (`gr.Error`), the CLI
prints it without a traceback. Programming errors stay ordinary exceptions.
"""

from __future__ import annotations

from typing import Any

from . import i18n


class EngineError(Exception):
    """Base class: the message is meant for the end user.

    Raised with a language-file key and its parameters (`EngineError(key="message.x", name=...)`), the message is
    rendered in the visitor's language by the UI (`render(lang)`) and in the command line's language by `str()`; raised
    with a plain text, that text is shown as is."""

    def __init__(self, message: str = "", *, key: str | None = None, **params: Any) -> None:
        self.key, self.params = key, params
        super().__init__(message or (i18n.t(key, i18n.cli_lang(), **params) if key else ""))

    def render(self, lang: str) -> str:
        """The message in `lang` ("en" or "pt-BR")."""
        return i18n.t(self.key, lang, **self.params) if self.key else str(self)


class ConfigError(EngineError):
    """A configuration value is not allowed. Names the field, the value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(key="message.config_error", field=field, value=repr(value), allowed=allowed)


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
