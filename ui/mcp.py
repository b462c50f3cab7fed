"""The MCP tools (python app.py --mcp): the app's main functions as typed, documented endpoints for AI assistants."""

from __future__ import annotations

import gradio as gr

from engine.training.jobs import JobManager
from ui.errors import ui_errors
from ui.queues import GPU, JOBS


def mcp_tools(demo: gr.Blocks, jobs: JobManager, owner_only: bool, allow_local_models: bool) -> None:
    """The app's main functions as typed, documented API endpoints, which gradio's MCP server lists as tools
    (engine/views/assistant.py). Run control is offered everywhere: on a shared app (owner_only) a run started over MCP
    gets its own owner key, which stop_training needs (an MCP caller has no browser key). gradio's MCP server lists every documented endpoint, and the page's ~100 form handlers (each .change of a widget)
    would bury these few: with --mcp they become "undocumented" (still callable by gradio_client, off the API page
    and the MCP tool list)."""
    from engine.views import assistant

    for block_fn in demo.fns.values():
        if block_fn.api_visibility == "public":
            block_fn.api_visibility = "undocumented"
    for fn in assistant.tools(jobs, allow_local_models=allow_local_models):
        limits = GPU if fn.__name__ == "generate" else JOBS if fn.__name__ == "start_training" else {}
        gr.api(ui_errors(fn), api_name=f"mcp_{fn.__name__}", **limits)
