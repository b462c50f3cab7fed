"""Who is acting (the browser's key or the API caller's session), that session's own upload folder, and the mark on
every component that names a run (`mark_run_refs`)."""

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


# The CSS class on every component whose value names a run (the run picker, the playground's models and adapter, the
# form's base and teacher): every endpoint that takes one asks the run gate (engine/run_access.py), and
# tests/app/test_run_access.py finds those endpoints by this mark.
RUN_REF_CLASS = "run-ref"


def mark_run_refs(*components: gr.components.Component) -> None:
    """Mark components whose value names a run (see RUN_REF_CLASS)."""
    for comp in components:
        classes = comp.elem_classes if isinstance(comp.elem_classes, list) else [comp.elem_classes] if comp.elem_classes else []
        comp.elem_classes = [*classes, RUN_REF_CLASS]
