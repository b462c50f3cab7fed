"""The export commands of the command line: `python -m engine merge|export-gguf|push` (registered on engine/cli.py's
parser by `add_export_parsers`). Each asks the run gate first (engine/run_access.py), as the page's buttons do; the app
runs `merge` as a subprocess job (engine/training/jobs.py) and shows its events."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..cli_flags import add_dataclass_args, given_fields
from ..config import GgufSettings
from ..errors import EngineError, Phrase, to_json
from ..fields import from_flat


def owner_gate(runs_dir: Any, run: str, action: str) -> None:
    """The run gate (engine/run_access.py), asked as every door asks it: the CLI runs as the machine's owner, who owns
    every run (also when the app starts it as a subprocess, with COMPACT_LAB_SHARED=1 in its environment: the app
    asked the gate for its visitor before)."""
    from ..run_access import check_run_access

    # a bare NAME is a run; a reference with a prefix (run:NAME, or builtin:NAME, which export-gguf also takes) is read as one
    check_run_access(runs_dir, run, None, action, plain=":" not in str(run), owner_only=False)


def cmd_merge(args: argparse.Namespace) -> int:
    import time

    from ..hardware.coexist import cuda_free_gib
    from ..hardware.device import detect_device, peak_memory_gib, reset_peak
    from ..refs import default_runs_dir
    from ..runs import EventLog, run_path
    from .merge import merge_adapter, merge_plan

    runs_dir = default_runs_dir()
    run_dir = run_path(runs_dir, args.run)
    owner_gate(runs_dir, args.run, "merge")
    # The app runs merges as this command in a subprocess (engine/training/jobs.py start_merge) and shows these events.
    events = EventLog(run_dir / "merge_events.jsonl")
    device = detect_device()
    try:
        plan = merge_plan(run_dir, runs_dir, device, cuda_free_gib()) if args.device == "auto" else None
        if args.device == "cpu" or (plan and plan.device == "cpu"):
            from ..hardware.device import DeviceInfo, ram_gib

            device = DeviceInfo("cpu", "CPU", ram_gib(), True) if device.kind == "cuda" else device  # merges in fp32 on CPU
        reason = plan.reason if plan else Phrase("text.merge.asked_cpu")
        events.write("merge_start", run=args.run, device=device.kind, reason=reason, reason_i18n=to_json(reason))  # the page's language
        print(reason, flush=True)
        t0 = time.time()
        reset_peak(device)
        out = merge_adapter(run_dir, dtype=args.dtype, runs_dir=runs_dir, device=device)
    except EngineError as exc:
        events.write("merge_error", message=str(exc), i18n=exc.to_record())
        raise
    except Exception as exc:  # noqa: BLE001 - record *why* the merge died for the page, then re-raise for the log
        events.write("merge_error", message=f"{type(exc).__name__}: {exc}")
        raise
    peak = peak_memory_gib(device)
    events.write("merge_done", path=str(out), seconds=round(time.time() - t0, 1), device=device.kind,
                 peak_gib=None if peak is None else round(peak, 3))
    print(f"merged model saved to {out}")
    return 0


def cmd_export_gguf(args: argparse.Namespace) -> int:
    from ..refs import default_runs_dir
    from .gguf_run import export_ref_gguf, zip_export

    settings = from_flat(GgufSettings, given_fields(args, GgufSettings))
    owner_gate(default_runs_dir(), args.run, "export")
    result = export_ref_gguf(args.run, default_runs_dir(), settings)
    print(f"GGUF ({result.arch}, {result.type}, {result.bytes / 2**20:,.1f} MiB, {result.seconds:.2f} s): {result.gguf_path}")
    print(f"Ollama Modelfile: {result.modelfile}" + ("" if result.template_checked else " (no TEMPLATE: see the comment inside)"))
    if args.zip:
        print(f"zip: {zip_export(result.folder)}")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    import getpass
    import os

    from ..errors import HubError
    from ..refs import default_runs_dir
    from ..runs import run_path
    from .hub import check_repo_id, hub_offline, push_run, push_source

    runs_dir = default_runs_dir()
    run_dir = run_path(runs_dir, args.run)
    owner_gate(runs_dir, args.run, "push")
    # Everything checkable here is checked before asking for a token (nobody should type a secret to learn
    # that the repo id has a typo).
    check_repo_id(args.repo)
    try:
        push_source(run_dir, args.what)
    except HubError:
        if not (args.merge and args.what == "merged"):
            raise
    if hub_offline():
        raise HubError("Offline mode is on (HF_HUB_OFFLINE=1): the Hub cannot be reached. Unset it to push.")
    token = os.environ.get("HF_TOKEN", "").strip() or None
    if token is None and sys.stdin.isatty():
        token = getpass.getpass("Hugging Face token with write permission (input hidden): ").strip() or None
    url = push_run(run_dir, args.repo, what=args.what, token=token, private=args.private, merge=args.merge,
                   license=args.license, runs_dir=runs_dir, gguf=args.gguf)
    print(f"pushed to {url}")
    return 0


def add_export_parsers(sub: Any) -> None:
    """Register `merge`, `export-gguf` and `push` on an argparse subparsers object."""
    p = sub.add_parser("merge", help="Merge a run's LoRA adapter into a 16-bit copy of its base model.")
    p.add_argument("run", help="Run name under the runs directory.")
    p.add_argument("--device", choices=["auto", "cpu"], default="auto",
                   help="auto: the GPU when the memory estimator says the unquantized base fits in its free memory, else the CPU.")
    p.add_argument("--dtype", choices=["auto", "fp16", "bf16", "fp32"], default="auto",
                   help="dtype of the saved weights (auto: bf16 on Ampere+, fp16 on older GPUs, fp32 on CPU).")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser(
        "export-gguf", help="Write a finished run (or builtin:NAME) to GGUF for llama.cpp / Ollama, with an Ollama Modelfile.",
        description="Write a finished run's model (full/scratch runs) or merged model (LoRA/QLoRA runs, merged first when needed) "
                    "to <runs>/_exports/gguf-<run>-<type>/: the .gguf file (tokenizer and chat template inside), an Ollama "
                    "Modelfile and gguf_info.json. Pure Python (the gguf package): nothing is compiled or downloaded.")
    p.add_argument("--run", required=True, help="Run name under the runs directory (or run:NAME, or builtin:NAME for a built-in model).")
    p.add_argument("--zip", action="store_true", help="Also pack the export folder into one zip beside it.")
    add_dataclass_args(p, GgufSettings)
    p.set_defaults(func=cmd_export_gguf)

    p = sub.add_parser(
        "push", help="Push a finished run's adapter, merged model or model to the Hugging Face Hub, with a model card.",
        description="Push a finished run to the Hugging Face Hub (the repo is created if missing) with a model card written "
                    "from its config and metrics. The token is read from $HF_TOKEN, or asked for (hidden) in a terminal. "
                    "There is deliberately no --token flag: a token on the command line stays in the shell history and "
                    "is visible to other users in the process list.")
    p.add_argument("--run", required=True, help="Run name under the runs directory.")
    p.add_argument("--repo", required=True, help="Hub repo as owner/name, e.g. alice/qwen-dates-lora.")
    p.add_argument("--what", choices=["adapter", "merged", "model"], default=None,
                   help="adapter (LoRA/QLoRA runs), merged (their merged 16-bit copy) or model (full/scratch runs); "
                        "default: the run's own output.")
    vis = p.add_mutually_exclusive_group()
    vis.add_argument("--private", dest="private", action="store_true", default=True, help="Create the repo private (default).")
    vis.add_argument("--public", dest="private", action="store_false", help="Create the repo public.")
    p.add_argument("--merge", action="store_true", help="With --what merged: merge the adapter first if it has not been merged.")
    p.add_argument("--license", default=None, help="License id for the model card (e.g. apache-2.0); default: omitted.")
    p.add_argument("--gguf", choices=["f16", "q8_0", "q4_0"], default=None,
                   help="Also upload a GGUF of the model (with --what merged or model) and its Ollama Modelfile.")
    p.set_defaults(func=cmd_push)


__all__ = ["add_export_parsers", "owner_gate"]
