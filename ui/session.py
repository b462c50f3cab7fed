"""Who is acting (the browser's key or the API caller's session) and that session's own upload folder."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from engine.views.uploads import session_dir


def session_key(owner_v: str | None, request: gr.Request | None) -> str | None:
    """Who is acting: the browser's key (kept in its local storage), else the gradio session of an API caller, so that a
    run started through the API belongs to that caller's session and never to everyone."""
    if owner_v:
        return str(owner_v)
    session = getattr(request, "session_hash", None)
    return f"session:{session}" if session else None


def uploads_of(upload_dir: Path, request: gr.Request | None) -> Path:
    """This session's upload folder (engine/views/uploads.py): a form may only name files in it."""
    return session_dir(upload_dir, getattr(request, "session_hash", None))
