"""The page (gradio only, thin): one module per panel and the shared page parts. app.py launches it.

| module | what lives there |
|---|---|
| page | build_app: the single gr.Blocks page, its three panels wired together; launch_options |
| estimator | panel 1, the memory estimator |
| finetune, finetune_form, finetune_run | panel 2: the panel, its form and handlers, the watched run and its actions |
| playground, playground_tabs, playground_handlers | panel 3: the panel, its parts, their handlers |
| language, login, mcp | the shared parts: the two languages, the login, the MCP tools |
| widgets, errors, session, queues, style | form widgets from the dataclasses, errors on the page, who acts, event queues, CSS |

The page's logic without gradio lives in engine/views/ (tested without a browser); engine/ never imports gradio.
"""
