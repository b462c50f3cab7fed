"""A shared app's MCP door (issue 25), attacked through the `mcp` package's own client over streamable HTTP against a
launched app (gradio's /gradio_api/mcp/): server paths probed through the estimator and the training tools get one
answer whether they exist or not, `list_runs` shows no upload path or name, run control needs the run's own owner key
and `stop_training` kills a run that ignores its STOP file, the choices are enums, and `--mcp` behind a login is refused
because gradio's MCP server neither checks nor carries the login. Shared mode is forced (COMPACT_LAB_SHARED=1)."""

from __future__ import annotations

import asyncio
import json
import shutil
import stat
import time
from types import SimpleNamespace

import pytest
from conftest import running_app, stubborn_run

pytest.importorskip("mcp")
gr = pytest.importorskip("gradio")

from engine.config import TrainConfig  # noqa: E402
from engine.runs import EventLog, save_config  # noqa: E402

FAKE_TOKEN = "hf_FAKEownerTOKENdoNotLeak1234567890"
PRIVATE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
           "num_hidden_layers": 2, "vocab_size": 256, "_name_or_path": "owner/PRIVATE-model-on-drive"}


async def _session(url: str, calls: list[tuple[str, dict]]):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        results = []
        for name, args in calls:
            r = await session.call_tool(name, args)
            results.append((not r.isError, "\n".join(getattr(c, "text", "") for c in r.content)))
        return tools, results


def mcp(ns, *calls: tuple[str, dict]):
    """(tools by name, [(ok, text) per call]) through a real MCP client session."""
    return asyncio.run(_session(ns.url, list(calls)))


@pytest.fixture(scope="module")
def m(runs_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-mcp")
    runs = root / "runs"
    shutil.copytree(runs_dir / "_builtin", runs / "_builtin")
    drive = root / "drive" / "private-model"  # the owner's private model on a mounted Drive
    drive.mkdir(parents=True)
    (drive / "config.json").write_text(json.dumps(PRIVATE))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPACT_LAB_SHARED", "1")
        mp.setenv("COMPACT_LAB_SHARE_OWNER_TOKEN", "0")
        mp.setenv("HF_TOKEN", FAKE_TOKEN)
        with running_app(runs, mcp=True, stop_grace_s=2.0) as demo:
            yield SimpleNamespace(runs=runs, root=root, drive=drive, url=demo.local_url.rstrip("/") + "/gradio_api/mcp/")


def no_leak(ns, text: str, *sent: str) -> None:
    for s in sorted(sent, key=len, reverse=True):  # what the caller sent, whole or shortened as messages show it
        text = text.replace(s, "<sent>").replace(s[:77] + "...", "<sent>")
    for leak in (FAKE_TOKEN, str(ns.runs), str(ns.root), "PRIVATE", "Traceback", "_uploads"):
        assert leak not in text, f"{leak!r} leaked in {text}"


def test_mcp_offers_run_control_with_enums_for_the_choices(m):
    tools, _ = mcp(m)
    assert {"estimate_memory", "list_runs", "training_status", "generate", "start_training", "stop_training"} <= set(tools)
    assert set(tools["estimate_memory"].inputSchema["properties"]["task"]["enum"]) == {"inference", "full", "lora", "qlora"}
    assert set(tools["start_training"].inputSchema["properties"]["method"]["enum"]) == {"qlora", "lora", "full", "scratch", "distill", "dpo", "orpo", "kto", "grpo"}
    assert "owner_key" in tools["stop_training"].inputSchema["properties"]


def _probes(ns):
    existing = [str(ns.drive / "config.json"), str(ns.drive), "/etc/passwd", str(ns.runs / "_builtin" / "compact-mini" / "model" / "config.json")]
    missing = [str(ns.root / "drive" / "nothing" / "config.json"), str(ns.root / "drive" / "nothing"), "/etc/no-such-file",
               str(ns.runs / "_builtin" / "no-such" / "config.json")]
    return list(zip(existing, missing, strict=True))


def hide(text: str, sent: str) -> str:
    """The message with the value the caller sent replaced by <path>, whole or as messages shorten it (80 characters)."""
    return text.replace(sent, "<path>").replace(sent[:77] + "...", "<path>")


@pytest.mark.parametrize("tool", ["estimate_memory", "generate", "start_training-base", "start_training-data"])
def test_a_server_path_gets_the_same_answer_through_mcp_whether_it_exists(m, tool):
    def args(path: str) -> dict:
        return {"estimate_memory": {"model": path, "task": "qlora"}, "generate": {"prompt": "hi", "model": path},
                "start_training-base": {"base_model": path, "max_steps": 1},
                "start_training-data": {"dataset": path + ".jsonl", "max_steps": 1}}[tool]

    name = tool.split("-")[0]
    before = sorted(p.name for p in m.runs.iterdir())
    for there, absent in _probes(m):
        _, [(ok_there, there_text), (ok_absent, absent_text)] = mcp(m, (name, args(there)), (name, args(absent)))
        assert not ok_there and not ok_absent, (there_text, absent_text)
        field = {"estimate_memory": "model", "generate": "server path", "start_training-base": "server paths", "start_training-data": "dataset"}[tool]
        assert field in there_text, there_text  # refused by the check that names it (not an unknown tool, nor a failed read)
        sent_there = [v for v in args(there).values() if isinstance(v, str) and v != "hi"][0]
        sent_absent = [v for v in args(absent).values() if isinstance(v, str) and v != "hi"][0]
        assert hide(there_text, sent_there) == hide(absent_text, sent_absent)
        no_leak(m, there_text, sent_there)
    assert sorted(p.name for p in m.runs.iterdir()) == before  # no run folder appeared


def test_mcp_list_runs_and_status_show_no_upload_path_nor_name(m):
    upload = m.runs / "_uploads" / ("a" * 16) / f"{'0' * 20}-alice-private-notes.jsonl"
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_text('{"text": "alice secret"}\n')
    run = m.runs / "alice-upload-run"
    run.mkdir()
    save_config(run, TrainConfig(run_name=run.name, base_model="builtin:compact-mini", dataset=str(upload)))
    EventLog(run / "events.jsonl").write("start", device_kind="cpu")
    EventLog(run / "events.jsonl").write("error", kind="data", message=f"could not read {upload}")
    _, [(ok, listed), (ok2, status)] = mcp(m, ("list_runs", {}), ("training_status", {"run": run.name}))
    assert ok and ok2
    for text in (listed, status):
        assert "(an uploaded file)" in text and "alice-private" not in text
        no_leak(m, text)
    assert json.loads(status)["dataset"] == "(an uploaded file)"


def test_mcp_stop_needs_the_runs_owner_key_and_kills_a_hung_run(m):
    from engine.training.jobs import JobManager

    key = "mcp:the-key-start_training-returned"
    proc = stubborn_run(m.runs, "mcp-hung", key)
    try:
        _, [(ok, text)] = mcp(m, ("stop_training", {"run": "mcp-hung"}))  # another MCP caller, without the key
        assert not ok and "another browser or session" in text and proc.poll() is None
        _, [(ok, text)] = mcp(m, ("stop_training", {"run": "mcp-hung", "owner_key": "mcp:a-guess"}))
        assert not ok and proc.poll() is None
        _, [(ok, text)] = mcp(m, ("stop_training", {"run": "mcp-hung", "owner_key": key}))
        assert ok, text
        proc.wait(timeout=30)  # it ignores STOP and SIGTERM: killed after the grace period (2 s here), as the page's Stop does
        deadline = time.time() + 15
        while time.time() < deadline and JobManager(m.runs).status("mcp-hung").state != "stopped":
            time.sleep(0.2)
        assert JobManager(m.runs).status("mcp-hung").state == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_start_training_gives_each_run_its_own_owner_key(monkeypatch, tmp_path):
    """The tool itself, with a stand-in Python so that no training runs: each start returns a fresh key that stops only its run."""
    from engine.training.jobs import JobManager
    from engine.views import assistant

    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    jobs = JobManager(tmp_path / "runs", python=str(fake), stop_grace_s=0.5)
    tools = {f.__name__: f for f in assistant.tools(jobs)}
    first = json.loads(tools["start_training"](max_steps=1))
    assert first["owner_key"].startswith("mcp:") and first["run"] in first["message"]
    assert not jobs.may_control(first["run"], None) and not jobs.may_control(first["run"], "mcp:other")
    assert jobs.may_control(first["run"], first["owner_key"])
    jobs.kill(first["run"])
    second = json.loads(tools["start_training"](max_steps=1, method="lora"))
    assert second["owner_key"] != first["owner_key"] and not jobs.may_control(second["run"], first["owner_key"])
    jobs.kill(second["run"])
