"""A shared app (public link, Colab, Space) attacked by someone who only has its URL, through its API (gradio_client).

Shared mode is forced with COMPACT_LAB_SHARED=1 (engine/sharing.py), a fake HF_TOKEN is in the server's environment,
and a Hub-style model in a temp Hugging Face cache carries code that would write a marker file if it ever ran. Two
API clients are two sessions, alice and bob. Every case checks: a message that names the problem, that the server
still serves, that no run folder appeared, that the code never ran, and that no token, server path or other
session's data is in the answer. The app is launched once for the module.
"""

from __future__ import annotations

import shutil
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import evil_hub_model, make_adapter_run, parquet_bomb, running_app, stubborn_run, wait_for_no_live_run, write_jsonl
from conftest import form_api_values as form
from conftest import gen_api_values as gen

gr = pytest.importorskip("gradio")
from gradio_client import Client, handle_file  # noqa: E402

from engine.config import MemoryQuery  # noqa: E402
from engine.fields import field_specs  # noqa: E402
from engine.runs import EventLog  # noqa: E402

FAKE_TOKEN = "hf_FAKEownerTOKENdoNotLeak1234567890"
EST_NAMES = [s.name for s in field_specs(MemoryQuery) if s.name != "model"]




def est(**overrides):
    values = {**{s.name: s.default for s in field_specs(MemoryQuery)}, **overrides}
    return [values[n] for n in EST_NAMES]


def owner_key(client: Client) -> str:
    return f"session:{client.session_hash}"  # what app.py's session_key gives an API caller


def _owned(run_dir: Path, client: Client) -> None:
    import hashlib

    (run_dir / "owner").write_text(hashlib.sha256(owner_key(client).encode()).hexdigest() + "\n")


@pytest.fixture(scope="module")
def s(runs_dir, tmp_path_factory):
    import huggingface_hub.constants as hf_constants

    root = tmp_path_factory.mktemp("hostile-shared")
    runs, marker = root / "runs", root / "REMOTE_CODE_RAN"
    shutil.copytree(runs_dir / "_builtin", runs / "_builtin")  # the pretrained built-in model, nothing else
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPACT_LAB_SHARED", "1")
        mp.setenv("COMPACT_LAB_SHARE_OWNER_TOKEN", "0")
        mp.setenv("HF_TOKEN", FAKE_TOKEN)
        mp.setattr(hf_constants, "HF_HUB_CACHE", str(root / "hub"))
        evil = evil_hub_model(root / "hub", marker)
        with running_app(runs, stop_grace_s=2.0, launch={"max_file_size": 1_000_000, "show_error": True}) as demo:
            alice, bob = Client(demo.local_url, verbose=False), Client(demo.local_url, verbose=False)
            ns = SimpleNamespace(runs=runs, root=root, marker=marker, evil=evil, alice=alice, bob=bob, url=demo.local_url, tmp=root / "files")
            ns.tmp.mkdir()
            _fixture_runs(ns)
            ns.watch = next(n for n, e in alice.view_api(return_format="dict", print_info=False)["named_endpoints"].items()
                            if [p["parameter_name"] for p in e["parameters"]] == ["n"])  # run_pick.input -> watched
            yield ns


def _fixture_runs(ns) -> None:
    """alice's finished LoRA run, her out-of-memory and stopped runs, a CLI run nobody owns, two damaged folders."""
    make_adapter_run(ns.runs, "alice-done")
    EventLog(ns.runs / "alice-done" / "events.jsonl").write("start", device_kind="cpu")
    EventLog(ns.runs / "alice-done" / "events.jsonl").write("done", output="adapter", steps=4)
    _owned(ns.runs / "alice-done", ns.alice)
    for name, event in (("alice-oom", {"type_": "error", "kind": "oom", "message": "Out of memory."}), ("alice-stopped", {"type_": "stopped", "step": 1})):
        (ns.runs / name).mkdir()
        (ns.runs / name / "config.yaml").write_text("method: lora\nbase_model: builtin:compact-mini\ndataset: builtin:dates\nmicro_batch_size: 4\n")
        EventLog(ns.runs / name / "events.jsonl").write("start", device_kind="cpu")
        EventLog(ns.runs / name / "events.jsonl").write(**event)
        _owned(ns.runs / name, ns.alice)
    make_adapter_run(ns.runs, "cli-run")
    EventLog(ns.runs / "cli-run" / "events.jsonl").write("done", output="adapter", steps=4)
    (ns.runs / "damaged-bytes").mkdir()
    (ns.runs / "damaged-bytes" / "config.yaml").write_bytes(b"method: \xff\xfe\xfa lora\n")
    (ns.runs / "damaged-deep").mkdir()
    (ns.runs / "damaged-deep" / "config.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")


def call(client: Client, api: str, *args):
    """(ok, what came back as text): the outputs, or the error message."""
    try:
        return True, client.predict(*args, api_name=api)
    except Exception as exc:  # noqa: BLE001 - gradio_client raises AppError (and others) with the message
        return False, str(exc)


def run_folders(runs: Path) -> set[str]:
    return {p.name for p in runs.iterdir() if not p.name.startswith(("_", "."))}


def check(ns, client, api, args, expect: str, *, ok: bool | None = False, runs_after: set[str] | None = None, secret: str = ""):
    """One hostile call: the answer names the problem (`expect`), the server still serves, no run folder appeared (or
    the set is `runs_after`), the remote code never ran, and no token, server path or `secret` (another session's data)
    is in the answer (a value the caller sent may be quoted back)."""
    runs_after = run_folders(ns.runs) if runs_after is None else runs_after
    done, out = call(client, api, *args)
    text = str(out)
    if ok is not None:
        assert done is ok, text
    assert expect.lower() in text.lower(), text
    quoted = text
    for sent in sorted((a for a in args if isinstance(a, str) and len(a) > 3), key=len, reverse=True):  # whole, or shortened as messages show it
        quoted = quoted.replace(sent, "<sent>").replace(sent[:77] + "...", "<sent>")
    for leak in (FAKE_TOKEN, str(ns.runs), str(ns.root), "Traceback", *([secret] if secret else [])):
        assert leak not in quoted, f"{leak!r} leaked in {text}"
    assert not ns.marker.exists(), "remote code ran"
    assert run_folders(ns.runs) == runs_after, "a run folder appeared or vanished"
    assert call(ns.bob, "/on_load")[0], "the server stopped answering"
    return out


# ---- 1. remote code and model folders on the server: refused (and the code never runs) ---------------------------

def _evil_form(ns, **kw):
    return form(base_model=ns.evil, method="lora", **kw)


REMOTE_CODE = [
    ("inspect-trust", "/inspect_data", lambda ns: _evil_form(ns, trust_remote_code=True), "trust_remote_code"),
    ("start-trust", "/start_training", lambda ns: _evil_form(ns, trust_remote_code=True, run_name="evil-run"), "trust_remote_code"),
    ("command-trust", "/show_command", lambda ns: _evil_form(ns, trust_remote_code=True), "trust_remote_code"),
    ("inspect-no-trust", "/inspect_data", lambda ns: _evil_form(ns), "never runs"),
    ("generate", "/generate", lambda ns: [ns.evil, "none", "chat", "", "hi", [], *gen()], "never runs"),
    ("compare", "/compare", lambda ns: ["builtin:compact-mini", ns.evil, "none", "chat", "", "hi", *gen()], "never runs"),
    ("perplexity", "/perplexity", lambda ns: [ns.evil, None, "none", False, "some text", "builtin:corpus", 0, 0], "never runs"),
    ("onnx", "/export_onnx", lambda ns: [ns.evil, "hi"], "never runs"),
    ("estimate", "/estimate", lambda ns: [ns.evil, "t4-16gb", *est()], "remote code"),
]


@pytest.mark.parametrize(("api", "args", "expect"), [c[1:] for c in REMOTE_CODE], ids=[c[0] for c in REMOTE_CODE])
def test_remote_code_never_runs(s, api, args, expect):
    check(s, s.alice, api, args(s), expect, ok=True if api == "/estimate" else False)


LOCAL_PATHS = [
    ("generate-folder", "/generate", lambda ns: [str(ns.runs / "_builtin" / "compact-mini" / "model"), "none", "chat", "", "hi", [], *gen()], "server paths"),
    ("generate-home", "/generate", lambda ns: ["~/.cache/huggingface", "none", "chat", "", "hi", [], *gen()], "server paths"),
    ("adapter-folder", "/generate", lambda ns: ["builtin:compact-mini", "none", "chat", "", "hi", [], *gen(), str(ns.runs / "alice-done" / "adapter")],
     "server paths"),
    ("start-base-folder", "/start_training", lambda ns: form(base_model=str(ns.runs / "_builtin" / "compact-mini" / "model"), run_name="x1"), "server paths"),
    ("inspect-teacher-folder", "/inspect_data", lambda ns: form(teacher_model="/etc", method="distill"), "teacher_model"),
    ("dataset-etc", "/inspect_data", lambda ns: form(dataset="/etc/passwd.jsonl"), "uploaded through the form"),
    ("dataset-traversal", "/start_training", lambda ns: form(dataset="_uploads/../../cli-run/events.jsonl", run_name="x2"), "uploaded through the form"),
    ("run-traversal", "/generate", lambda ns: ["run:../../etc", "none", "chat", "", "hi", [], *gen()], "plain name"),
    ("estimate-server-json", "/estimate", lambda ns: ["/etc/hosts.json", "t4-16gb", *est()], "uploaded through the form"),
    ("onnx-folder", "/export_onnx", lambda ns: [str(ns.runs / "alice-done"), "hi"], "server paths"),
]


@pytest.mark.parametrize(("api", "args", "expect"), [c[1:] for c in LOCAL_PATHS], ids=[c[0] for c in LOCAL_PATHS])
def test_server_paths_are_refused(s, api, args, expect):
    check(s, s.bob, api, args(s), expect, ok=True if api == "/estimate" else False)


PRIVATE_CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                  "num_hidden_layers": 2, "vocab_size": 256, "_name_or_path": "owner/PRIVATE-model-on-drive"}


def _private_config(ns) -> Path:
    """The owner's private model config on a mounted Drive (issue 25: the page's Copy to Fine-tune read it)."""
    import json

    path = ns.root / "drive" / "private-model" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(PRIVATE_CONFIG))
    return path


@pytest.mark.parametrize("api", ["/copy_to_finetune", "/estimate", "/predict_memory"])
def test_a_server_config_gets_the_same_answer_through_every_estimator_door_whether_it_exists(s, api):
    there = str(_private_config(s))
    absent = str(s.root / "drive" / "no-such-model" / "config.json")
    answers = []
    for path in (there, absent):
        args = {"/copy_to_finetune": [1, path, "t4-16gb", *est()], "/estimate": [path, "t4-16gb", *est()],
                "/predict_memory": form(base_model=path)}[api]
        out = check(s, s.bob, api, args, "", ok=None, secret="PRIVATE")
        answers.append(str(out).replace(path, "<path>"))
    assert answers[0] == answers[1], answers
    assert "owner/PRIVATE" not in answers[0]


def test_a_session_cannot_estimate_with_another_sessions_uploaded_config(s):
    import json

    mine = s.tmp / "alice-config.json"
    mine.write_text(json.dumps({**PRIVATE_CONFIG, "_name_or_path": "alice/SECRET-config"}))
    path = s.alice.predict(handle_file(str(mine)), api_name="/on_config_upload")
    path = path["value"] if isinstance(path, dict) else path
    assert "_uploads" in path
    ok, out = call(s.alice, "/estimate", path, "t4-16gb", *est())
    assert ok and "SECRET" in str(out)  # her own upload: estimated
    check(s, s.bob, "/estimate", [path, "t4-16gb", *est()], "uploaded through the form", ok=True, secret="SECRET")
    check(s, s.bob, "/copy_to_finetune", [1, path, "t4-16gb", *est()], "uploaded through the form", secret="SECRET")


# ---- 2. one session may not act on another's runs ---------------------------------------------------------------

BOB_ON_ALICE = [
    ("resume", "/resume_training", ["alice-stopped"], "another browser or session"),
    ("retry", "/retry_oom", ["alice-oom"], "another browser or session"),
    ("delete", "/delete_run", ["alice-done"], "another browser or session"),
    ("zip", "/download_run", ["alice-done"], "another browser or session"),
    ("merge", "/merge_adapter", ["alice-done"], "another browser or session"),
    ("push", "/push_to_hub", ["alice-done", "bob/stolen", "adapter", True, "hf_bobsOwnToken123"], "another browser or session"),
    ("delete-cli-run", "/delete_run", ["cli-run"], "another browser or session"),
    ("zip-cli-run", "/download_run", ["cli-run"], "another browser or session"),
    ("zip-traversal", "/download_run", ["../_builtin"], "is not valid: use letters"),  # the run gate refuses the name itself
    ("delete-traversal", "/delete_run", ["../../etc"], "is not valid: use letters"),
    ("stop-watched", "/stop_training", [], "another browser or session"),  # bob's page watches the newest run: not his
]


@pytest.mark.parametrize(("api", "args", "expect"), [c[1:] for c in BOB_ON_ALICE], ids=[c[0] for c in BOB_ON_ALICE])
def test_a_session_cannot_act_on_another_sessions_runs(s, api, args, expect):
    check(s, s.bob, api, args, expect, secret="hf_bobsOwnToken123")
    assert (s.runs / "alice-done" / "adapter").exists() and not (s.runs / "alice-done" / "merged").exists()


def test_bob_cannot_stop_alices_hung_run_and_alices_stop_kills_it(s):
    from engine.training.jobs import JobManager

    proc = stubborn_run(s.runs, "alice-hung", owner_key(s.alice))
    try:
        s.alice.predict(api_name="/on_load")  # their pages list the runs (the run picker accepts only listed names)
        s.bob.predict(api_name="/on_load")
        s.bob.predict("alice-hung", api_name=s.watch)  # bob watches it, then presses Stop
        check(s, s.bob, "/stop_training", [], "another browser or session")
        assert proc.poll() is None
        s.alice.predict("alice-hung", api_name=s.watch)
        check(s, s.alice, "/stop_training", [], "", ok=True)  # (its message is a toast, not an output)
        proc.wait(timeout=30)  # killed (SIGKILL on its process group) although it ignored STOP and SIGTERM
        deadline = time.time() + 15  # then the app records the stop
        while time.time() < deadline and JobManager(s.runs).status("alice-hung").state != "stopped":
            time.sleep(0.2)
        summary = JobManager(s.runs).status("alice-hung")
        assert summary.state == "stopped" and summary.restartable  # no checkpoint yet: Resume starts it again
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_alices_own_zip_is_hers_under_an_unguessable_name_outside_the_runs_folder(s):
    import httpx

    s.alice.predict(api_name="/on_load")
    out = check(s, s.alice, "/download_run", ["alice-done"], "alice-done", ok=True)
    path = Path(out["value"] if isinstance(out, dict) else out)
    with zipfile.ZipFile(path) as zf:
        assert any(n.endswith("adapter_config.json") for n in zf.namelist())
    assert not (s.runs / "_exports").exists()  # nothing under a guessable runs-folder name any more
    for guess in (f"{s.runs}/_exports/alice-done.zip", f"{s.runs}/alice-done/config.yaml", f"{s.runs}/alice-done/owner"):
        r = httpx.get(f"{s.url.rstrip('/')}/gradio_api/file={guess}")
        assert r.status_code in (403, 404), (guess, r.status_code)


def test_a_run_started_over_the_api_belongs_to_its_session(s):
    from engine.training.jobs import JobManager

    wait_for_no_live_run(s.runs)
    data = write_jsonl(s.tmp / "alice-private.jsonl", [{"instruction": "alice secret question", "output": "alice secret answer"}] * 8)
    before = run_folders(s.runs)
    after = before | {"alice-api"}
    check(s, s.alice, "/start_training", form(handle_file(str(data)), max_steps=100000, run_name="alice-api"), "alice-api", ok=True, runs_after=after)
    jobs = JobManager(s.runs)
    try:
        uploaded = jobs.status("alice-api").dataset
        assert uploaded.endswith("alice-private.jsonl") and (s.runs / "_uploads") in Path(uploaded).parents
        check(s, s.bob, "/delete_run", ["alice-api"], "another browser or session", runs_after=after)
        check(s, s.bob, "/resume_training", ["alice-api"], "another browser or session", runs_after=after)
        check(s, s.bob, "/inspect_data", form(dataset=uploaded), "uploaded through the form", runs_after=after, secret="alice secret")
        ok, loaded = call(s.bob, "/on_load")
        assert ok and "alice-private" not in str(loaded) and "_uploads" not in str(loaded)
        from engine.views.run_history import selected_details  # what a selected history row shows of the run's data

        details = selected_details(jobs, "alice-api")
        assert "(an uploaded file)" in details and "alice-private" not in details and "_uploads" not in details
        check(s, s.alice, "/stop_training", [], "", ok=True, runs_after=after)
    finally:
        deadline = time.time() + 60  # stopped by its STOP file, or killed after the grace period and then recorded as stopped
        while time.time() < deadline and (jobs.active() or jobs.status("alice-api").state != "stopped"):
            time.sleep(0.5)
    assert jobs.status("alice-api").state == "stopped"
    check(s, s.alice, "/delete_run", ["alice-api"], "", ok=True, runs_after=before)
    assert not (s.runs / "alice-api").exists()


def test_unload_models_is_not_for_visitors(s):
    check(s, s.bob, "/unload_models", [], "off on a shared app")


# ---- 3. limits before work ---------------------------------------------------------------------------------------

def _file(ns, name: str, data: bytes | str) -> str:
    path = ns.tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return handle_file(str(path))


def _bomb(ns):
    return handle_file(str(parquet_bomb(ns.tmp / "bomb.parquet")))


DATA = [
    ("parquet-bomb", lambda ns: _bomb(ns), "3,000,000 rows"),
    ("nested-jsonl", lambda ns: _file(ns, "nested.jsonl", '{"text": "ok"}\n' + "[" * 100_000 + "]" * 100_000 + "\n"), "line 2"),
    ("nested-json", lambda ns: _file(ns, "nested.json", "[" * 100_000 + "]" * 100_000), "nested too deeply"),
    ("latin1-csv", lambda ns: _file(ns, "latin1.csv", "instruction,output\nol\xe1,a\n".encode("latin-1")), "not UTF-8"),
    ("binary-jsonl", lambda ns: _file(ns, "binary.jsonl", b"\x00\x01\x02" * 100), "binary"),
    ("utf16-txt", lambda ns: _file(ns, "utf16.txt", "hello".encode("utf-16")), "UTF-16"),
    ("wide-csv", lambda ns: _file(ns, "wide.csv", ",".join(f"c{i}" for i in range(2000)) + "\n" + ",".join("x" * 2000) + "\n"), "2,000 columns"),
    ("broken-json-line", lambda ns: _file(ns, "broken.jsonl", '{"text": "a"}\n{"text": \n'), "line 2"),
    ("empty-file", lambda ns: _file(ns, "empty.jsonl", b"   \n"), "empty"),
]


@pytest.mark.parametrize(("upload", "expect"), [c[1:] for c in DATA], ids=[c[0] for c in DATA])
def test_hostile_data_files_give_a_message_before_any_work(s, upload, expect):
    t0 = time.time()
    check(s, s.bob, "/inspect_data", form(upload(s)), expect)
    assert time.time() - t0 < 60  # refused before the rows are built (the bomb took minutes and 3 GiB before)


def test_a_file_over_the_upload_limit_is_refused(s):
    check(s, s.bob, "/inspect_data", form(_file(s, "big.jsonl", '{"text": "aaaaaaaa"}\n' * 120_000)), "")
    assert not any(p.name.endswith("big.jsonl") for p in (s.runs / "_uploads").rglob("*"))


ARCH = [
    ("manual-huge-layers", "/manual_architecture", [10**9, 4096, 32, 8, 14336, 128256, False], "layers"),
    ("manual-huge-vocab", "/manual_architecture", [32, 4096, 32, 8, 14336, 10**12, False], "vocab"),
    ("manual-text", "/manual_architecture", ["many", 4096, 32, 8, 14336, 128256, False], "layers"),
    ("manual-negative", "/manual_architecture", [32, -4096, 32, 8, 14336, 128256, False], "hidden"),
    ("manual-list", "/manual_architecture", [32, 4096, [32], 8, 14336, 128256, False], "heads"),
    ("manual-ref-huge", "/estimate", ["manual:L=100000000,h=64,a=4,i=128,v=100", "t4-16gb", *est()], "layers"),
]


@pytest.mark.parametrize(("api", "args", "expect"), [c[1:] for c in ARCH], ids=[c[0] for c in ARCH])
def test_architectures_are_bounded(s, api, args, expect):
    check(s, s.bob, api, args, expect, ok=None)


# ---- 4. malformed API values: a message naming the field ----------------------------------------------------------

MALFORMED = [
    ("max-steps-text", "/start_training", lambda ns: form(max_steps="lots", run_name="m1"), "max_steps"),
    ("lr-null", "/start_training", lambda ns: form(learning_rate=None, run_name="m2"), "learning_rate"),
    ("lora-r-list", "/inspect_data", lambda ns: form(**{"lora.r": [8]}), "lora.r"),
    ("max-new-tokens-text", "/generate", lambda ns: ["builtin:compact-mini", "none", "chat", "", "hi", [], *gen(max_new_tokens="ten")], "max_new_tokens"),
    ("temperature-null", "/generate", lambda ns: ["builtin:compact-mini", "none", "chat", "", "hi", [], *gen(temperature=None)], "temperature"),
    ("mode-unknown", "/generate", lambda ns: ["builtin:compact-mini", "none", "rm -rf", "", "hi", [], *gen()], "not in the list of choices: ['chat'"),
    ("quant-unknown", "/generate", lambda ns: ["builtin:compact-mini", "int3", "chat", "", "hi", [], *gen()], "not in the list of choices"),
    ("micro-batch-text", "/batch_generate", lambda ns: ["builtin:compact-mini", "none", "chat", "a\nb", None, "big", *gen()], "micro batch"),
    ("window-text", "/perplexity", lambda ns: ["builtin:compact-mini", None, "none", False, "some text", "builtin:corpus", "wide", 0], "window"),
    ("estimate-batch-text", "/estimate", lambda ns: ["builtin:compact-mini", "t4-16gb", *est(batch="many")], "batch"),
    ("push-bad-repo", "/push_to_hub", lambda ns: ["alice-done", "not a repo", "adapter", True, "hf_x"], "another browser or session"),
]


@pytest.mark.parametrize(("api", "args", "expect"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_api_values_name_the_field(s, api, args, expect):
    out = check(s, s.bob, api, args(s), expect, ok=None)
    assert "unexpected error" not in str(out).lower()


@pytest.mark.parametrize("system", [None, 42], ids=["null", "number"])
def test_a_null_or_numeric_system_prompt_is_taken_as_text(s, system):
    out = check(s, s.bob, "/generate", ["builtin:compact-mini", "none", "chat", system, "hi", [], *gen()], "assistant", ok=True)
    assert out[0][-1]["role"] == "assistant"


# ---- 5. a damaged run folder breaks nothing else ----------------------------------------------------------------

def test_damaged_run_folders_show_as_damaged_and_break_nothing(s):
    ok, loaded = call(s.bob, "/on_load")
    assert ok
    history = loaded[1]["data"] if isinstance(loaded[1], dict) else loaded[1]
    states = {row[0]: row[2] for row in history}  # the history's columns: run, method, status, started, eval loss
    assert states["damaged-bytes"] == "⚒ damaged" and states["damaged-deep"] == "⚒ damaged" and states["alice-done"] == "✔ finished"
    choices = [c[0] if isinstance(c, (list, tuple)) else c for c in (loaded[2].get("choices") or [])]
    assert "run:alice-done" in choices and "run:damaged-bytes" not in choices
    check(s, s.bob, "/generate", ["run:damaged-bytes", "none", "chat", "", "hi", [], *gen()], "damaged-bytes")
