"""Errors on the page: engine errors as a readable gr.Error (ui_errors), or shown beside the inputs that caused them (beside);
never a traceback or a server path in the browser."""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

import gradio as gr

from engine import i18n
from engine.errors import EngineError
from ui.language import lang_of, tr


def ui_errors(fn):
    """Engine errors become a readable gr.Error in the browser, never a traceback or a dead server (generators too); an
    unexpected error becomes a plain message naming its kind (the details go to the server's log only)."""

    def unexpected(exc: Exception) -> gr.Error:
        logging.getLogger("app").exception("unexpected error in %s", fn.__name__)
        return gr.Error(tr("message.unexpected", kind=type(exc).__name__, where=fn.__name__.removeprefix("on_")))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EngineError as exc:
            raise gr.Error(exc.render(lang_of())) from None
        except gr.Error:
            raise
        except Exception as exc:  # noqa: BLE001 - never a traceback (or a server path) in the browser
            raise unexpected(exc) from None

    @functools.wraps(fn)
    def gen_wrapper(*args, **kwargs):
        try:
            yield from fn(*args, **kwargs)
        except EngineError as exc:
            raise gr.Error(exc.render(lang_of())) from None
        except gr.Error:
            raise
        except Exception as exc:  # noqa: BLE001 - as above
            raise unexpected(exc) from None

    return gen_wrapper if inspect.isgeneratorfunction(fn) else wrapper


def beside(fn: Any, kept: Any) -> Any:
    """The page's variant of a handler: its outputs plus an empty notice line; on an error, `kept(*args)` (what was on
    screen: the conversation, the prompt...) plus the message, in the visitor's language, in the notice line beside the
    inputs. Nothing the person typed or got is replaced by an error badge; the API endpoint of the same handler still
    raises (ui_errors)."""

    def message(exc: Exception, args: tuple) -> str:
        request = next((a for a in args if isinstance(a, gr.Request)), None)
        lang = lang_of(request)
        if isinstance(exc, EngineError):
            text = exc.render(lang)
        elif isinstance(exc, gr.Error):
            text = exc.message
        else:  # never a traceback (or a server path) on the page; the details go to the server's log
            logging.getLogger("app").exception("unexpected error in %s", fn.__name__)
            text = i18n.t("message.unexpected", lang, kind=type(exc).__name__, where=fn.__name__.removeprefix("page_"))
        return i18n.t("playground.chat.error", lang, message=text)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args, **kwargs):
            try:
                for out in fn(*args, **kwargs):
                    yield (*out, "") if isinstance(out, tuple) else (out, "")
            except Exception as exc:  # noqa: BLE001 - shown beside the inputs (see message)
                yield (*kept(*args), message(exc, args))
        return gen

    @functools.wraps(fn)
    def plain(*args, **kwargs):
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - as above
            return (*kept(*args), message(exc, args))
        return (*out, "") if isinstance(out, tuple) else (out, "")
    return plain
