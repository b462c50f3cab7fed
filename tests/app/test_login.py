"""Login (ui/login.py `login_of`, gradio's own launch(auth=...)): --auth USER:PASSWORD or COMPACT_LAB_AUTH, on by default with a
generated password on a Colab public link, --no-auth with a warning; and the launched page refuses everything (its
/config included) until logged in."""

from __future__ import annotations

import argparse

import pytest
from conftest import running_app

gr = pytest.importorskip("gradio")
import httpx  # noqa: E402
from gradio_client import Client  # noqa: E402

from engine import sharing  # noqa: E402


def _args(**kw):
    return argparse.Namespace(**{"auth": None, "no_auth": False, **kw})


LOCAL, SHARED = sharing.Decision(False, ()), sharing.Decision(True, ("--share",))


def test_login_from_the_flag_or_the_environment(monkeypatch):
    from ui import login as app  # the login's module

    monkeypatch.delenv(app.AUTH_ENV, raising=False)
    assert app.login_of(_args(auth="ana:s3cret:with:colons"), LOCAL)[0] == ("ana", "s3cret:with:colons")
    monkeypatch.setenv(app.AUTH_ENV, "space:from-a-secret")
    auth, note = app.login_of(_args(), SHARED)
    assert auth == ("space", "from-a-secret") and "from-a-secret" not in note
    for bad in ("nopassword", ":x", "user:"):
        with pytest.raises(SystemExit, match="USER:PASSWORD"):
            app.login_of(_args(auth=bad), LOCAL)


def test_colab_public_link_gets_a_generated_password_unless_no_auth(monkeypatch):
    from ui import login as app  # the login's module

    monkeypatch.delenv(app.AUTH_ENV, raising=False)
    monkeypatch.setattr(sharing, "on_colab", lambda: True)
    (user, password), note = app.login_of(_args(), SHARED)
    assert user == "lab" and len(password) >= 12 and password in note
    assert app.login_of(_args(), SHARED)[0][1] != password  # new at every start
    auth, warning = app.login_of(_args(no_auth=True), SHARED)
    assert auth is None and warning.startswith("WARNING: --no-auth on a shared app")
    assert app.login_of(_args(), LOCAL) == (None, None)  # a local app on Colab without a link: nothing to protect


def test_the_page_answers_401_until_logged_in(tmp_path):
    with running_app(tmp_path / "runs", launch={"auth": ("lab", "pw-123")}) as demo:
        base = demo.local_url.rstrip("/")
        assert httpx.get(f"{base}/config").status_code == 401
        assert httpx.get(f"{base}/gradio_api/info").status_code == 401
        with pytest.raises(Exception):  # noqa: B017 - gradio_client raises its own error types for a refused login
            Client(demo.local_url, verbose=False)
        with httpx.Client() as http:
            assert http.post(f"{base}/login", data={"username": "lab", "password": "wrong"}).status_code in (400, 401)
            assert http.get(f"{base}/config").status_code == 401
            assert http.post(f"{base}/login", data={"username": "lab", "password": "pw-123"}).status_code == 200
            assert http.get(f"{base}/config").status_code == 200
        client = Client(demo.local_url, auth=("lab", "pw-123"), verbose=False)
        assert client.predict(api_name="/on_load")[1] is not None  # logged in: the run history answers
