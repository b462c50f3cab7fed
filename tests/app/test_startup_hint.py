"""The console at start-up: gradio's own hint names its code's argument ("set `share=True` in `launch()`"), which a
student running `python app.py` cannot use; the app's next line says how it is done here (the --share flag)."""

from __future__ import annotations

import socket

import gradio as gr
import pytest

import app
from engine import sharing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def quick_main(monkeypatch, tmp_path):
    """app.main with a one-line page, returning as soon as it has launched (the real page is tested elsewhere)."""
    for env in (sharing.SHARED_ENV, sharing.OWNER_TOKEN_ENV, "COMPACT_LAB_RUNS", "SPACE_ID"):
        monkeypatch.setenv(env, "")  # recorded, so that what main() sets (sharing.activate) is undone after the test
        monkeypatch.delenv(env)

    def tiny_page(*_args, **_kwargs) -> gr.Blocks:
        with gr.Blocks() as demo:
            gr.Markdown("hello")
        return demo

    monkeypatch.setattr(app, "build_app", tiny_page)
    monkeypatch.setattr(gr.Blocks, "block_thread", lambda self: self.close())
    return lambda *argv: app.main(["--port", str(_free_port()), "--runs-dir", str(tmp_path / "runs"), *argv])


def test_a_local_start_says_how_to_get_a_public_link_here(quick_main, capsys):
    quick_main()
    out = capsys.readouterr().out
    assert "Running on local URL:" in out  # the notebook launcher waits for this line (engine/notebook.py)
    if "share=True" in out:  # gradio's own hint: explained right after it
        assert out.index(app.SHARE_HINT) > out.index("share=True")
    assert "`python app.py --share`" in app.SHARE_HINT and app.SHARE_HINT in out


def test_a_space_gets_no_share_hint(quick_main, capsys, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/lab")
    quick_main("--no-share")
    assert app.SHARE_HINT not in capsys.readouterr().out
