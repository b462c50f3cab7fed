"""The app's export actions and MCP tools end to end, against a launched app: Export GGUF of a finished run through its
API (gradio_client), and `--mcp`: the tools listed and `estimate_memory` called through the `mcp` package's own client
over streamable HTTP (gradio's endpoint /gradio_api/mcp/). CPU, offline."""

from __future__ import annotations

import asyncio
import json
import shutil
import zipfile

import pytest
from conftest import finish_run, running_app
from gradio_client import Client

from engine.config import TrainConfig
from engine.models.references import builtin_model_dir


def test_export_gguf_of_a_finished_run(runs_dir, tmp_path):
    run = runs_dir / "gguf-app-full"
    if not run.exists():  # a finished full run (its model/ is the session's built-in model)
        shutil.copytree(builtin_model_dir("compact-mini", runs_dir), run / "model")
        finish_run(run, TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=2, run_name=run.name))
    with running_app(runs_dir) as demo:
        client = Client(demo.local_url, verbose=False)
        archive, message = client.predict(run.name, "q4_0", api_name="/export_gguf")
        archive = archive["value"] if isinstance(archive, dict) else archive  # a gr.update(value=..., visible=True)
        assert "GGUF q4_0 (gpt2" in message and "ollama create" in message
        with zipfile.ZipFile(archive) as zf:
            names = set(zf.namelist())
        assert {f"gguf-{run.name}-q4_0/{run.name}-q4_0.gguf", f"gguf-{run.name}-q4_0/Modelfile"} <= names
        with pytest.raises(Exception, match="no-such-run"):  # the run picker takes any name; the engine says there is no such run
            client.predict("no-such-run", "q8_0", api_name="/export_gguf")


async def _mcp_session(url: str):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        result = await session.call_tool("estimate_memory", {"model": "builtin:compact-mini", "task": "qlora", "batch": 2, "seq_len": 128})
        runs = await session.call_tool("list_runs", {})
        return tools, result, runs


def test_mcp_lists_tools_and_estimates(runs_dir):
    pytest.importorskip("mcp")
    with running_app(runs_dir, mcp=True) as demo:
        tools, result, runs = asyncio.run(_mcp_session(demo.local_url.rstrip("/") + "/gradio_api/mcp/"))
        # the page's own endpoints are off the tool list but still callable (undocumented), so the page and its API work
        assert "Unloaded" in Client(demo.local_url, verbose=False).predict(api_name="/unload_models")
    assert set(tools) == {"estimate_memory", "list_models", "list_runs", "training_status", "generate", "start_training", "stop_training"}
    schema = tools["estimate_memory"].inputSchema["properties"]
    assert schema["batch"]["type"] == "integer" and "micro batch" in schema["batch"]["description"]
    assert "fits common cards" in tools["estimate_memory"].description
    assert not result.isError
    data = json.loads(result.content[0].text)
    assert data["model"] and data["total_gib"] > 0 and data["verdict_per_tier"]
    assert not runs.isError


def test_mcp_on_a_shared_app_offers_run_control_with_an_owner_key(runs_dir):
    """An MCP caller has no browser key: on a shared app each run it starts gets its own owner key (tests/app/test_hostile_mcp.py)."""
    pytest.importorskip("mcp")

    async def listed(url: str) -> dict:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            return {t.name: t for t in (await session.list_tools()).tools}

    with running_app(runs_dir, mcp=True, owner_only=True) as demo:
        found = asyncio.run(listed(demo.local_url.rstrip("/") + "/gradio_api/mcp/"))
    assert set(found) == {"estimate_memory", "list_models", "list_runs", "training_status", "generate", "start_training", "stop_training"}
    assert "owner_key" in found["stop_training"].inputSchema["properties"]


def test_onnx_tab_is_disabled_with_the_install_command_when_packages_are_missing(runs_dir, monkeypatch):
    import app
    from engine.export import onnx

    monkeypatch.setattr(onnx, "missing_packages", lambda: ["onnxruntime"])
    demo = app.build_app(runs_dir)
    components = demo.config["components"]
    note = next(c for c in components if c.get("props", {}).get("elem_id") == "playground-onnx-note")
    assert "onnxruntime not installed" in note["props"]["value"] and "pip install -r requirements-onnx.txt" in note["props"]["value"]
    button = next(c for c in components if c.get("props", {}).get("elem_id") == "playground-onnx-btn")
    assert button["props"]["interactive"] is False
