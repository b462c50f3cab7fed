"""Compact LLM Lab: the entry. Arguments, the sharing decision, the login, and the launch of the page (ui/).

The page itself is the `ui` package, one module per panel (ui/estimator.py, ui/finetune.py, ui/playground.py) and the
shared parts (ui/language.py, ui/login.py, ui/mcp.py, ui/page.py); the logic it shows lives in engine/views/.

Run: `python app.py [--share] [--port N] [--runs-dir DIR] [--auth USER:PASSWORD] [--mcp]`. On a shared app (a public
link, Colab, Kaggle, SageMaker, GRADIO_SHARE, a Space, a non-loopback address: engine/sharing.py) every run and file belongs to the session that made it,
and visitors never run remote code or use the server's Hugging Face token (docs/security.md).
"""

from __future__ import annotations

import argparse
import os

from engine import sharing
from engine.data.files import MAX_FILE_BYTES
from engine.errors import EngineError
from engine.hardware.startup import device_lines
from engine.refs import default_runs_dir
from engine.training.jobs import JobManager
from engine.views import run_control
from ui.login import AUTH_ENV, login_of
from ui.page import build_app, launch_options

__all__ = ["build_app", "launch_options", "login_of", "main"]  # the entry's names the tests and notebooks use
SHARE_HINT = ("* In Compact LLM Lab that is the --share flag: `python app.py --share` opens a public link (with a login by default; "
              "anyone with the link and the login can use the app).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Compact LLM Lab web app")
    share = parser.add_mutually_exclusive_group()
    share.add_argument("--share", action="store_true", default=None,
                       help="Create a public gradio.live link (on by default on Colab, Kaggle, SageMaker and with GRADIO_SHARE=true).")
    share.add_argument("--no-share", dest="share", action="store_false", default=None, help="No public link, even where gradio would open one by itself.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                        help="0.0.0.0 to listen on all interfaces (the app is then shared: see docs/security.md).")
    parser.add_argument("--runs-dir", default=None, help="Where runs are stored (default: $COMPACT_LAB_RUNS or ./runs).")
    parser.add_argument("--allow-local-models", action="store_true",
                        help="Let the playground and the fine-tune form use model folders on this machine's disk (a trusted local app only, never when shared).")
    parser.add_argument("--auto-resume", action="store_true",
                        help="At start, resume the newest interrupted run (its process ended without finishing: a Colab disconnect).")
    parser.add_argument("--auth", default=None, metavar="USER:PASSWORD", help=f"Ask for a login (also ${AUTH_ENV}, e.g. a Space secret).")
    parser.add_argument("--no-auth", action="store_true", help="No login, even on a public link the app opens (anyone with the link can use the app).")
    parser.add_argument("--share-owner-token", action="store_true",
                        help="On a shared app, let visitors' model loads use this server's HF_TOKEN: anyone with the link can then read "
                             "your private and gated repositories. Off by default.")
    parser.add_argument("--mcp", action="store_true",
                        help="Also serve the app's main functions (estimate memory, list models and runs, start/stop/status of a training run, "
                             "generate) as MCP tools for AI assistants at /gradio_api/mcp/ (needs the mcp package of requirements.txt).")
    args = parser.parse_args(argv)
    decision = sharing.decide(share=args.share, host=args.host)
    if overridden := sharing.no_share_overrides(share=args.share):
        print("--no-share: no public link, although " + " and ".join(overridden) + " would open one by itself.", flush=True)
    if args.allow_local_models and decision.shared:
        parser.error("--allow-local-models cannot be used on a shared app (" + "; ".join(decision.reasons) + "): anyone with the link could read "
                     "model folders on this machine.")
    sharing.activate(decision.shared, owner_token=args.share_owner_token)
    for line in device_lines():  # the device in use, and a loud warning when a GPU is here but torch cannot use it
        print(line, flush=True)
    if decision.shared:
        print("Shared app (" + "; ".join(decision.reasons) + "): runs and files belong to the session that made them; no remote code; "
              + ("visitors' loads USE this server's HF_TOKEN (--share-owner-token)." if args.share_owner_token else "the server's HF_TOKEN is not used for visitors."))
    auth, note = login_of(args, decision)
    try:
        sharing.check_mcp_login(args.mcp, auth)  # gradio's MCP server neither checks nor carries a login (engine/sharing.py)
    except EngineError as exc:
        parser.error(str(exc))
    if note:
        print(note, flush=True)
    if args.runs_dir:
        os.environ["COMPACT_LAB_RUNS"] = args.runs_dir
    runs_dir = default_runs_dir()
    demo = build_app(runs_dir, allow_local_models=args.allow_local_models, mcp=args.mcp)
    if args.auto_resume:
        try:
            print(run_control.auto_resume(JobManager(runs_dir)) or "--auto-resume: no interrupted run to resume.", flush=True)
        except EngineError as exc:  # e.g. a run is still going: the app starts anyway, and says why nothing resumed
            print(f"--auto-resume: {exc}", flush=True)
    demo.queue(default_concurrency_limit=1)
    # No allowed_paths: files handed back (zips, CSVs, ONNX) are copied by gradio into its own cache from a private folder.
    # show_error: gradio's own input checks (a value outside a dropdown's choices) reach an API caller as a message;
    # every handler turns its own errors into messages without server details (ui_errors).
    # share: the decision's own value, never None, so gradio's rules for share=None (hosted notebooks, GRADIO_SHARE) cannot
    # open a public link the decision does not know about
    demo.launch(share=decision.share, server_name=args.host, server_port=args.port, auth=auth,
                max_file_size=MAX_FILE_BYTES, show_error=True, mcp_server=args.mcp, prevent_thread_lock=True, **launch_options())
    if not decision.share and not os.environ.get("SPACE_ID"):  # gradio's own hint above names its code (share=True in launch())
        print(SHARE_HINT, flush=True)
    demo.block_thread()


if __name__ == "__main__":
    main()
