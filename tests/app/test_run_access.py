"""One gate for what may be done with a run (engine/run_access.py), on a launched shared app with the MCP tools on.

alice owns a finished full fine-tune and a LoRA run; bob is another session. The gate itself is checked as a table
(owner-only actions refused to bob, every visitor action open to him); the ONNX export, the one export that did not ask
before, refuses bob; and every endpoint of the app whose inputs name a run (a component marked with
ui/session.py RUN_REF_CLASS, or an API function parameter named like a run or model) is called by bob with alice's run
while the gate is watched: an endpoint that does not ask the gate fails the test, so a new export cannot forget it.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import make_adapter_run, running_app

gr = pytest.importorskip("gradio")
from gradio_client import Client  # noqa: E402

from engine import run_access  # noqa: E402
from engine.errors import EngineError, JobError  # noqa: E402
from engine.runs import EventLog  # noqa: E402
from ui.session import RUN_REF_CLASS  # noqa: E402

# Parameters of API functions (gr.api, the MCP tools) that name a run or a model that may be one.
RUN_PARAMS = {"run", "name", "run_name", "model", "base_model", "teacher_model", "adapter", "model_a", "model_b"}
ASKED = "GATE-WAS-ASKED"


def session_key(client: Client) -> str:
    return f"session:{client.session_hash}"  # ui/session.py session_key for an API caller


def _own(run_dir: Path, client: Client) -> None:
    (run_dir / "owner").write_text(hashlib.sha256(session_key(client).encode()).hexdigest() + "\n")


def _full_run(runs: Path, name: str) -> None:
    """A finished full fine-tune: the built-in model's weights as the run's model."""
    shutil.copytree(runs / "_builtin" / "compact-mini" / "model", runs / name / "model")
    (runs / name / "config.yaml").write_text(yaml.safe_dump({"method": "full", "base_model": "builtin:compact-mini", "dataset": "builtin:dates"}))
    EventLog(runs / name / "events.jsonl").write("start", device_kind="cpu")
    EventLog(runs / name / "events.jsonl").write("done", output="model", steps=4)


@pytest.fixture(scope="module")
def app(runs_dir, tmp_path_factory):
    pytest.importorskip("mcp")
    root = tmp_path_factory.mktemp("run-access")
    runs = root / "runs"
    shutil.copytree(runs_dir / "_builtin", runs / "_builtin")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPACT_LAB_SHARED", "1")
        with running_app(runs, mcp=True, launch={"show_error": True}) as demo:
            alice, bob = Client(demo.local_url, verbose=False), Client(demo.local_url, verbose=False)
            _full_run(runs, "alice-full")
            make_adapter_run(runs, "alice-lora")
            EventLog(runs / "alice-lora" / "events.jsonl").write("done", output="adapter", steps=4)
            for name in ("alice-full", "alice-lora"):
                _own(runs / name, alice)
            for client in (alice, bob):
                client.predict(api_name="/on_load")  # their pages list the runs
            yield SimpleNamespace(demo=demo, runs=runs, alice=alice, bob=bob)


def _call(client: Client, api: str, *args):
    try:
        return True, client.predict(*args, api_name=api)
    except Exception as exc:  # noqa: BLE001 - gradio_client raises AppError with the message
        return False, str(exc)


# ---- the gate itself --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("action", sorted(run_access.ACTIONS))
def test_the_gate_refuses_owner_only_actions_to_anyone_but_the_owner(tmp_path, monkeypatch, action):
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "owner").write_text(run_access.owner_hash("key-a") + "\n")
    for ref in ("mine", "run:mine", "run:mine/merged"):
        run_access.check_run_access(tmp_path, ref, "key-a", action, plain=True)  # the owner: always
    if run_access.ACTIONS[action]:
        with pytest.raises(JobError) as err:
            run_access.check_run_access(tmp_path, "run:mine/merged", "key-b", action)
        # refused in both languages, naming the run
        assert "mine" in err.value.render("en") and "another browser" in err.value.render("en")
        assert "outro navegador" in err.value.render("pt-BR")
        monkeypatch.setenv("COMPACT_LAB_SHARED", "0")  # a local app: everyone owns every run
    run_access.check_run_access(tmp_path, "run:mine", "key-b", action)
    run_access.check_run_access(tmp_path, "builtin:compact-mini", None, action)  # no run: nothing to ask


def test_a_name_that_leaves_the_runs_folder_is_refused_whatever_the_action(tmp_path):
    with pytest.raises(EngineError):
        run_access.check_run_access(tmp_path, "run:../etc", None, "try")


# ---- the ONNX export, which did not ask before -------------------------------------------------------------------

def test_bob_cannot_export_alices_run_to_onnx(app):
    ok, out = _call(app.bob, "/export_onnx", "run:alice-full", "hi")
    assert not ok and "only that browser can export it to ONNX" in out, out
    assert "Traceback" not in out and str(app.runs) not in out


def test_alice_exports_her_own_run_to_onnx(app):
    from engine.export.onnx import missing_packages

    if missing_packages():
        pytest.skip(f"the optional ONNX packages are not installed: {missing_packages()}")
    ok, out = _call(app.alice, "/export_onnx", "run:alice-full", "hi")
    assert ok, out


def test_bob_cannot_train_a_new_run_from_alices_run(app):
    from engine.config import TrainConfig
    from engine.training.jobs import JobManager

    jobs = JobManager(app.runs)
    before = {p.name for p in app.runs.iterdir()}
    with pytest.raises(JobError, match="only that browser can train a new run from it"):
        jobs.start(TrainConfig(method="lora", base_model="run:alice-lora", dataset="builtin:dates", max_steps=1), owner="bob")
    assert {p.name for p in app.runs.iterdir()} == before


# ---- every endpoint that takes a run asks the gate ----------------------------------------------------------------

def _value(param: dict) -> object:
    """A plain value for a parameter the test does not aim at: its default, else its example (no file: none)."""
    if param.get("parameter_has_default"):
        return param["parameter_default"]
    example = param.get("example_input")
    if isinstance(example, dict) and ("path" in example or "url" in example):
        return None
    return example if example is not None else param.get("parameter_default")


def _run_endpoints(demo) -> dict[str, dict[int, str]]:
    """api name -> {position among its API parameters: the value that names alice's run there} for its inputs that name
    a run: a bare name for a run picker (a dropdown of run names) or a run parameter, else run:NAME."""
    out: dict[str, dict[int, str]] = {}
    info = demo.get_api_info(all_endpoints=True)["named_endpoints"]
    for fn in demo.fns.values():
        if not fn.api_name or fn.api_visibility == "private" or f"/{fn.api_name}" not in info:
            continue
        params = info[f"/{fn.api_name}"]["parameters"]
        shown = [c for c in fn.inputs if not getattr(c, "skip_api", False)]
        # a marked component, or a parameter of an API function (gr.api, an MCP tool) named like a run
        marked = {i: ("alice-lora" if (isinstance(c, gr.Dropdown) and not c.allow_custom_value) or p["parameter_name"] in ("run", "name", "run_name")
                      else "run:alice-lora")
                  for i, (c, p) in enumerate(zip(shown, params, strict=True))
                  if RUN_REF_CLASS in (c.elem_classes or []) or (p["component"] == "Api" and p["parameter_name"] in RUN_PARAMS)}
        if marked:
            out[fn.api_name] = marked
    return out


def test_every_endpoint_that_takes_a_run_asks_the_gate(app, monkeypatch):
    endpoints = _run_endpoints(app.demo)
    # the endpoints of today (new ones join by themselves)
    for known in ("export_onnx", "download_run", "export_gguf", "merge_adapter", "push_to_hub", "delete_run", "resume_training",
                  "retry_oom", "generate", "compare", "batch_generate", "perplexity", "task_accuracy", "start_training",
                  "inspect_data", "run_status", "mcp_generate", "mcp_training_status", "mcp_start_training", "mcp_stop_training"):
        assert known in endpoints, f"{known} takes a run but is not found as such"
    asked: list[tuple[str, str]] = []
    real = run_access.check_run_access

    def watched(runs_dir, ref, owner, action, *, plain=False, owner_only=None):
        name = run_access.run_name_of(ref, plain=plain)
        if name == "alice-lora":
            asked.append((name, action))
            raise EngineError(f"{ASKED}:{action}")
        return real(runs_dir, ref, owner, action, plain=plain, owner_only=owner_only)

    monkeypatch.setattr(run_access, "check_run_access", watched)
    info = app.demo.get_api_info(all_endpoints=True)["named_endpoints"]
    forgot = {}
    for api, marked in sorted(endpoints.items()):
        params = info[f"/{api}"]["parameters"]
        args = [_value(p) for p in params]
        for i, value in marked.items():
            args[i] = value
        ok, out = _call(app.bob, f"/{api}", *args)
        if ASKED not in str(out):
            forgot[api] = str(out)[:300]
    assert not forgot, f"endpoints that take a run without asking engine/run_access.py check_run_access: {forgot}"
    assert asked
