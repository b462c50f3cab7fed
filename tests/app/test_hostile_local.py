"""A local app (not shared) given hostile input through its API (gradio_client): code shipped with a Hub model never runs
unless its owner ticks 'Trust remote code', data bombs and malformed values are messages, a damaged run folder breaks
nothing, a run that ignores its Stop is killed, and no token or server path comes back. The owner's own machine, so
runs are not tied to sessions and unloading models is allowed. The app is launched once for the module.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import evil_hub_model, make_adapter_run, parquet_bomb, running_app, stubborn_run
from conftest import form_api_values as form
from conftest import gen_api_values as gen

gr = pytest.importorskip("gradio")
from gradio_client import Client, handle_file  # noqa: E402

from engine.fields import field_specs  # noqa: E402
from engine.runs import EventLog  # noqa: E402

FAKE_TOKEN = "hf_FAKElocalTOKENdoNotLeak0987654321"




@pytest.fixture(scope="module")
def s(runs_dir, tmp_path_factory):
    import huggingface_hub.constants as hf_constants

    root = tmp_path_factory.mktemp("hostile-local")
    runs, marker = root / "runs", root / "REMOTE_CODE_RAN"
    shutil.copytree(runs_dir / "_builtin", runs / "_builtin")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("COMPACT_LAB_SHARED", raising=False)
        mp.setenv("HF_TOKEN", FAKE_TOKEN)
        mp.setattr(hf_constants, "HF_HUB_CACHE", str(root / "hub"))
        mp.setenv("HF_HUB_CACHE", str(root / "hub"))  # for the training subprocess too
        evil = evil_hub_model(root / "hub", marker)
        make_adapter_run(runs, "done-run")
        EventLog(runs / "done-run" / "events.jsonl").write("done", output="adapter", steps=4)
        (runs / "broken").mkdir()
        (runs / "broken" / "config.yaml").write_bytes(b"base_model: \xc3\x28\xa0\xa1\n")
        with running_app(runs, stop_grace_s=2.0, launch={"show_error": True}) as demo:
            client = Client(demo.local_url, verbose=False)
            ns = SimpleNamespace(runs=runs, root=root, marker=marker, evil=evil, client=client, tmp=root / "files")
            ns.tmp.mkdir()
            ns.watch = next(n for n, e in client.view_api(return_format="dict", print_info=False)["named_endpoints"].items()
                            if [p["parameter_name"] for p in e["parameters"]] == ["n"])
            yield ns


def check(ns, api, args, expect: str, *, ok: bool | None = False):
    """The answer names the problem, the server still serves, no run folder appeared, the code never ran, and no token
    or server path (other than one the caller sent) is in the answer."""
    folders = {p.name for p in ns.runs.iterdir()}
    try:
        done, out = True, ns.client.predict(*args, api_name=api)
    except Exception as exc:  # noqa: BLE001 - gradio_client's AppError carries the message
        done, out = False, str(exc)
    text = str(out)
    if ok is not None:
        assert done is ok, text
    assert expect.lower() in text.lower(), text
    quoted = text
    for sent in sorted((a for a in args if isinstance(a, str) and len(a) > 3), key=len, reverse=True):
        quoted = quoted.replace(sent, "<sent>")
    for leak in (FAKE_TOKEN, str(ns.root), "Traceback"):
        assert leak not in quoted, f"{leak!r} leaked in {text}"
    assert not ns.marker.exists(), "remote code ran"
    assert {p.name for p in ns.runs.iterdir()} == folders
    ns.client.predict(api_name="/on_load")  # still serving
    return out


def _file(ns, name: str, data: bytes | str):
    path = ns.tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return handle_file(str(path))


CASES = [
    ("evil-inspect", "/inspect_data", lambda ns: form(base_model=ns.evil, method="lora"), "trust remote code"),
    ("evil-start", "/start_training", lambda ns: form(base_model=ns.evil, method="lora", run_name="evil"), "remote code"),
    ("evil-generate", "/generate", lambda ns: [ns.evil, "none", "chat", "", "hi", [], *gen()], "trust remote code"),
    ("evil-estimate", "/estimate", lambda ns: [ns.evil, "t4-16gb"], "remote code"),
    ("server-folder", "/generate", lambda ns: [str(ns.runs / "done-run"), "none", "chat", "", "hi", [], *gen()], "server paths"),
    ("parquet-bomb", "/inspect_data", lambda ns: form(handle_file(str(parquet_bomb(ns.tmp / "bomb.parquet")))), "3,000,000 rows"),
    ("nested-jsonl", "/inspect_data", lambda ns: form(_file(ns, "n.jsonl", "[" * 50_000 + "]" * 50_000 + "\n")), "line 1"),
    ("latin1", "/inspect_data", lambda ns: form(_file(ns, "l.jsonl", '{"text": "ol\xe1"}\n'.encode("latin-1"))), "not UTF-8"),
    ("rows-over-cap", "/inspect_data", lambda ns: form(_file(ns, "many.csv", "text\n" + "a\n" * 200_001)), "200,000"),
    ("max-new-tokens-text", "/generate", lambda ns: ["builtin:compact-mini", "none", "chat", "", "hi", [], *gen(max_new_tokens="x")], "max_new_tokens"),
    ("stride-list", "/perplexity", lambda ns: ["builtin:compact-mini", None, "none", False, "text", "builtin:corpus", 0, [1]], "stride"),
    ("history-not-list", "/generate", lambda ns: ["builtin:compact-mini", "none", "chat", "", "hi", "not a list", *gen()], ""),
    ("damaged-run", "/generate", lambda ns: ["run:broken", "none", "chat", "", "hi", [], *gen()], "broken"),
]


@pytest.mark.parametrize(("api", "args", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_on_a_local_app(s, api, args, expect):
    if api == "/estimate":
        from engine.config import MemoryQuery

        rest = [spec.default for spec in field_specs(MemoryQuery) if spec.name != "model"]
        check(s, api, [*args(s), *rest], expect, ok=True)
        return
    check(s, api, args(s), expect)


def test_a_damaged_run_folder_shows_as_damaged_and_the_rest_works(s):
    out = s.client.predict(api_name="/on_load")
    history = out[1]["data"] if isinstance(out[1], dict) else out[1]
    assert {r[0]: r[2] for r in history}["broken"] == "⚒ damaged"  # the history's columns: run, method, status, started, eval loss
    chat = check(s, "/generate", ["run:done-run", "none", "chat", None, "hi", [], *gen()], "assistant", ok=True)
    assert chat[0][-1]["role"] == "assistant"
    check(s, "/unload_models", [], "unloaded", ok=True)  # the owner's own machine: allowed


def test_a_run_that_ignores_stop_is_killed_and_resumable(s):
    from engine.training.jobs import JobManager

    proc = stubborn_run(s.runs, "hung", None)
    try:
        s.client.predict(api_name="/on_load")
        s.client.predict("hung", api_name=s.watch)
        s.client.predict(api_name="/stop_training")
        proc.wait(timeout=30)  # killed after the 2 s grace period although it ignored STOP and SIGTERM
        deadline = time.time() + 10
        while time.time() < deadline and JobManager(s.runs).status("hung").state != "stopped":
            time.sleep(0.2)
        summary = JobManager(s.runs).status("hung")
        assert summary.state == "stopped" and summary.restartable  # no checkpoint yet: Resume starts it again
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(s.runs / "hung")


def test_a_zip_comes_back_from_a_private_folder(s):
    s.client.predict(api_name="/on_load")
    out = check(s, "/download_run", ["done-run"], "done-run", ok=True)
    path = Path(out["value"] if isinstance(out, dict) else out)
    assert path.suffix == ".zip" and not (s.runs / "_exports").exists()
