"""Notes for people that travel with a result (a generation's "max new tokens lowered", a batch's "halved after an
out-of-memory"): a `Note` is a plain string in the command line's language, so logs, the CLI and older callers keep
working, and it also carries its language-file key and parameters so the page can show it in the visitor's language."""

from __future__ import annotations

from typing import Any

from .. import i18n


class Note(str):
    """A note: `str(note)` in the command line's language, `render(lang)` in any language."""

    key: str
    params: dict[str, Any]

    def __new__(cls, key: str, /, **params: Any) -> Note:
        note = super().__new__(cls, i18n.t(key, i18n.cli_lang(), **params))
        note.key, note.params = key, params
        return note

    def render(self, lang: str) -> str:
        """The note in `lang` ("en" or "pt-BR")."""
        return i18n.t(self.key, lang, **self.params)


def render_note(note: Any, lang: str) -> str:
    """A note of a result in `lang`: a `Note` rendered in that language, any other text as it is."""
    return note.render(lang) if isinstance(note, Note) else str(note)
