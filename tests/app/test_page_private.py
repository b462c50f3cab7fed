"""Nothing private in what the page is built with: the app restarts over a runs folder holding another visitor's
finished run, trained on that visitor's upload, and someone fetches the page and its configuration.

- On a public link with the login on (Kaggle, GRADIO_SHARE, --share): `GET /` without credentials is gradio's login
  form, with the API description embedded (gradio/routes.py `main` builds `gradio_api_info` whether or not the visitor
  is logged in), while /config and /gradio_api/info answer 401.
- On a Space (no login): every visitor's page and /config.

Neither may carry a run name, a row, a path or a file name of the other visitor's: the run lists, example prompts and
defaults taken from a run are filled for each session when it loads the page (ui/page.py demo.load), never baked in.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import finish_run, make_adapter_run, running_app, write_jsonl

gr = pytest.importorskip("gradio")
import httpx  # noqa: E402

SECRETS = ("alicesecretrun", "ALICESECRET", "alicesecretfile", "_uploads")


@pytest.fixture(scope="module")
def runs(runs_dir, tmp_path_factory):
    """A runs folder as a restarted app finds it: alice's finished LoRA run, trained on her own upload."""
    from engine.config import TrainConfig

    runs = tmp_path_factory.mktemp("page-private") / "runs"
    shutil.copytree(runs_dir / "_builtin", runs / "_builtin")
    upload = runs / "_uploads" / ("a1" * 8)
    upload.mkdir(parents=True)
    rows = [{"instruction": f"ALICESECRETROW question {i}", "output": "ALICESECRETANSWER"} for i in range(20)]
    data = write_jsonl(upload / ("0" * 20 + "-alicesecretfile.jsonl"), rows)
    make_adapter_run(runs, "alicesecretrun")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPACT_LAB_SHARED", "1")
        finish_run(runs / "alicesecretrun", TrainConfig(method="lora", base_model="builtin:compact-mini", dataset=str(data)))
    (runs / "alicesecretrun" / "owner").write_text("0" * 64 + "\n")  # alice's key, which nobody here holds
    return runs


def _leaks(text: str, runs) -> list[str]:
    """Each secret found, with what surrounds it."""
    return [f"{s}: ...{text[max(0, text.find(s) - 200):text.find(s) + 60]}..." for s in (*SECRETS, str(runs)) if s in text]


def test_the_page_configuration_holds_no_run_upload_or_row(runs, monkeypatch):
    import app

    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    demo = app.build_app(runs)
    config = json.dumps(demo.get_config_file(), default=str)
    api_info = json.dumps(demo.get_api_info(all_endpoints=True), default=str)
    assert not _leaks(config, runs) and not _leaks(api_info, runs)


def test_without_the_password_the_login_page_holds_nothing_of_another_visitor(runs, monkeypatch):
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    with running_app(runs, launch={"auth": ("lab", "a-long-password")}) as demo:
        url = demo.local_url.rstrip("/")
        page = httpx.get(url + "/")
        assert page.status_code == 200 and "gradio_api_info" in page.text  # gradio's login form, the API description inside
        assert not _leaks(page.text, runs), _leaks(page.text, runs)
        for closed in ("/config", "/gradio_api/info"):
            assert httpx.get(url + closed).status_code == 401
        with httpx.Client() as logged_in:  # the password opens the page; its sessions get the runs when they load it
            assert logged_in.post(url + "/login", data={"username": "lab", "password": "a-long-password"}).status_code == 200
            assert not _leaks(logged_in.get(url + "/config").text, runs)


def test_a_space_visitors_page_holds_nothing_of_another_visitor(runs, monkeypatch):
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    monkeypatch.setenv("SPACE_ID", "someone/compact-llm-lab")
    with running_app(runs) as demo:
        url = demo.local_url.rstrip("/")
        for path in ("/", "/config", "/gradio_api/info"):
            r = httpx.get(url + path)
            assert r.status_code == 200 and not _leaks(r.text, runs), (path, _leaks(r.text, runs))


def test_a_session_gets_the_runs_when_it_loads_the_page_and_never_anothers_rows(runs, monkeypatch):
    """The runs are still there for a visitor (to watch, try and compare: docs/security.md), filled when the page loads;
    the example prompt of a run trained on an upload is not a row of that upload."""
    from gradio_client import Client

    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    with running_app(runs) as demo:
        bob = Client(demo.local_url, verbose=False)
        loaded = json.dumps(bob.predict(api_name="/on_load"), default=str)
        assert "alicesecretrun" in loaded  # the run picker lists the run for this session
        assert "ALICESECRET" not in loaded and "alicesecretfile" not in loaded and "_uploads" not in loaded
