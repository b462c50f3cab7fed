"""Command line: `python -m engine estimate|train|generate|prepare-builtin|ship-example|merge|mix|bench|export-gguf|push|runs`.

Every flag is generated from the config dataclasses (engine/config.py): the flag's help is the field's
help text, choices come from its Literal type, and values are validated by the same __post_init__ the UI
uses. Errors the user can fix print one clear line (no traceback) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from .cli_flags import add_dataclass_args, flag, given_fields, merge_flat
from .config import BenchConfig, GenerationSettings, MixConfig, QuantSettings, TrainConfig
from .errors import EngineError, RunStopped
from .fields import from_dict, from_flat, to_dict

# --------------------------------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------------------------------


def cmd_train(args: argparse.Namespace) -> int:
    import yaml

    from .hardware.cpu_bf16 import bound_kernel_cache

    bound_kernel_cache()  # before this training process's first matmul
    from .hardware.distributed import is_main_process as distributed_main
    from .refs import default_runs_dir
    from .runs import EventLog, run_path
    from .training.run import run_training

    runs_dir = default_runs_dir()
    data: dict[str, Any] = {}
    config = _resume_config(args) if args.resume else args.config
    if config:
        try:
            data = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise EngineError(f"Cannot read the config file {config}: {exc.strerror}.") from None
        except yaml.YAMLError as exc:
            raise EngineError(f"The config file {config} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise EngineError(f"The config file {config} must be a YAML mapping of TrainConfig fields.")
    if args.resume and data and "packing" not in data:
        # a run saved before packing existed was padded: keep its data layout (and the batches resume skips) as it was
        data["packing"] = False
    cfg = from_dict(TrainConfig, merge_flat(data, given_fields(args, TrainConfig)))
    if args.run_dir:
        run_dir = Path(args.run_dir).resolve()
    else:
        from .hardware import distributed
        from .hardware.device import detect_device
        from .training.jobs import JobManager

        # Under `accelerate launch` the default name (a timestamp) could differ between ranks: rank 0 picks it.
        distributed.init(cpu=detect_device().kind == "cpu")
        run_dir = run_path(runs_dir, distributed.broadcast_object(JobManager(runs_dir).new_run_name(cfg)))
    if args.print_config:
        from .runs import config_yaml

        print(config_yaml(cfg))
        return 0
    if not run_dir.exists():  # refusals before side effects: a refused config leaves no run folder behind
        from .training.preflight import check_before_start, check_data_before_start

        check_before_start(cfg, runs_dir)
        check_data_before_start(cfg)  # the data check's refusals (an empty file, no format, DPO without pairs)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"run folder: {run_dir}", flush=True)
    _record_launched_pid(run_dir)
    events = EventLog(run_dir / "events.jsonl", all_ranks=True)  # a failure of any rank must reach the UI
    try:
        result = run_training(cfg, run_dir, runs_dir=runs_dir, resume=args.resume)
    except RunStopped as exc:  # a Stop honoured before training proper (the built-in base's pretraining): resumable
        (run_dir / "STOP").unlink(missing_ok=True)
        events.write("stopped", step=0, checkpoint=None, message=str(exc), i18n=exc.to_record())
        print(str(exc), flush=True)
        return 0
    except EngineError as exc:
        # "nan": the loss diverged; `i18n`: the key and parameters, so the page shows it in its visitor's language
        events.write("error", kind=getattr(exc, "kind", "engine"), message=str(exc), i18n=exc.to_record())
        raise
    except Exception as exc:  # noqa: BLE001 - record *why* the run died, then re-raise for the log
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            oom = EngineError(key="error.train.oom")
            msg = str(oom)
            events.write("error", kind="oom", message=msg, i18n=oom.to_record())
            print(f"error: {msg}", file=sys.stderr)
            return 3
        events.write("error", kind="crash", message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-4000:])
        raise
    if distributed_main():
        print(json.dumps(result, default=str), flush=True)
    return 0


def _resume_config(args: argparse.Namespace) -> Path:
    """The config a resumed run continues with: always the run's own `<run-dir>/config.yaml`. A resumed run that
    trained with other settings than its checkpoints were made with would be a different job in the same folder, so
    any flag that would change the config is refused, naming it (--config is accepted only when it is that file)."""
    from .errors import ConfigError

    if not args.run_dir:
        raise ConfigError("--run-dir", None, "the folder of the run to resume (--resume continues an existing run)")
    own = Path(args.run_dir) / "config.yaml"
    if not own.is_file():
        raise ConfigError("--run-dir", args.run_dir, "a run folder with a config.yaml (nothing to resume there)")
    if args.config and Path(args.config).resolve() != own.resolve():
        raise ConfigError("--config", args.config, f"nothing, or the run's own {own}: a resumed run keeps the config it started with")
    given = given_fields(args, TrainConfig)
    if given:
        flags = ", ".join(flag(name) for name in given)
        raise ConfigError(flags, ", ".join(f"{v}" for v in given.values()),
                          f"no settings flags with --resume: the run continues with its own {own} (start a new run to change them)")
    return own


def _record_launched_pid(run_dir: Path) -> None:
    """A run started by `accelerate launch` (not by the app's JobManager, which writes `<run>/pid` itself): rank 0
    records its pid so that the app shows the run as running (not "killed"), refuses a second job meanwhile,
    and can stop it (STOP file) or kill its process group."""
    from .hardware import distributed
    from .runs import atomic_write_text
    from .training.processes import proc_start_time, run_is_alive

    if distributed.is_distributed() and distributed.is_main_process() and not run_is_alive(run_dir):
        pid = os.getpid()
        atomic_write_text(run_dir / "pid", f"{pid} {proc_start_time(pid) or ''}\n")


# --------------------------------------------------------------------------------------------------
# generate
# --------------------------------------------------------------------------------------------------


def cmd_generate(args: argparse.Namespace) -> int:
    from .inference.generate import stream_generate
    from .models.loading import load_model
    from .refs import default_runs_dir

    settings = from_flat(GenerationSettings, given_fields(args, GenerationSettings))
    quant = from_flat(QuantSettings, given_fields(args, QuantSettings, prefix="quant."))
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    loaded = load_model(args.model, quant, runs_dir=default_runs_dir(), trust_remote_code=args.trust_remote_code, allow_local_paths=True)
    last = None
    for update in stream_generate(loaded, prompt, settings, chat=not args.raw):
        sys.stdout.write(update.new_text)
        sys.stdout.flush()
        last = update
    sys.stdout.write("\n")
    if last is not None:
        print(f"[{last.n_tokens} tokens, {last.tokens_per_s:.1f} tok/s, first token {last.ttft:.2f}s]", file=sys.stderr)
    return 0


def cmd_prepare_builtin(args: argparse.Namespace) -> int:
    from .models.references import shipped_model_dir
    from .refs import default_runs_dir
    from .training.builtin import ensure_builtin
    from .training.run import run_training

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.ship:
        from .training.ship import ship_builtin

        dest = shipped_model_dir(args.preset)
        record = ship_builtin(args.preset, default_runs_dir(), dest, pretrain=run_training, store=args.store,
                              command=f"python -m engine prepare-builtin {args.preset} --ship --store {args.store}")
        print(json.dumps(record, indent=2))
        print(f"shipped built-in model written to {dest}")
        return 0
    path = ensure_builtin(args.preset, default_runs_dir(), pretrain=run_training, rebuild=args.rebuild)
    print(f"built-in model ready: {path}")
    return 0


def cmd_ship_example(args: argparse.Namespace) -> int:
    from .export.example import ship_example
    from .models.references import shipped_model_dir
    from .refs import default_runs_dir
    from .runs import run_path

    record = ship_example(run_path(default_runs_dir(), args.run), shipped_model_dir(args.name), store=args.store,
                          command=args.command or f"python -m engine ship-example {args.run} {args.name} --store {args.store}")
    print(json.dumps(record, indent=2))
    print(f"shipped example written to {shipped_model_dir(args.name)}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .training.bench_job import cmd_bench as run

    return run(from_flat(BenchConfig, given_fields(args, BenchConfig)))


def cmd_mix(args: argparse.Namespace) -> int:
    from .training.mix_job import mix_command

    return mix_command(given_fields(args, MixConfig), args.run_dir)


def cmd_runs(args: argparse.Namespace) -> int:
    from .refs import default_runs_dir
    from .training.jobs import JobManager

    for s in JobManager(default_runs_dir()).list_runs():
        loss = f"{s.last_loss:.3f}" if s.last_loss is not None else "-"
        print(f"{s.name:40s} {s.state:9s} {s.method:8s} step {s.step}/{s.max_steps} loss {loss}")
    return 0


# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from .export.cli import add_export_parsers
    parser = argparse.ArgumentParser(prog="python -m engine", description="Compact LLM Lab engine: estimate memory, train, generate.")
    sub = parser.add_subparsers(dest="command", required=True)

    from .estimator.cli import add_estimate_parser

    add_estimate_parser(sub)

    p = sub.add_parser("train", help="Train (QLoRA / LoRA / full / from scratch / distill) into a run folder.",
                       description="Train into a run folder. Fields come from --config YAML, overridden by flags.")
    p.add_argument("--config", help="YAML file with TrainConfig fields (a run's config.yaml).")
    p.add_argument("--run-dir", help="Run folder (default: <runs>/<run name>).")
    p.add_argument("--resume", action="store_true", help="Continue from the last complete checkpoint in the run folder.")
    p.add_argument("--print-config", action="store_true", help="Print the resolved config as YAML and exit.")
    add_dataclass_args(p, TrainConfig)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("generate", help="Stream text from a model (built-in, run:NAME, Hub id or folder).")
    p.add_argument("--model", default="builtin:compact-mini", help="builtin:NAME, run:NAME, a Hub id or a model folder.")
    p.add_argument("--prompt", help="Prompt text (default: read from stdin).")
    p.add_argument("--raw", action="store_true", help="Raw completion instead of the chat template.")
    p.add_argument("--trust-remote-code", action="store_true", help="Run Python code shipped with a Hub model.")
    add_dataclass_args(p, GenerationSettings)
    add_dataclass_args(p, QuantSettings, prefix="quant.")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "prepare-builtin", help="Pretrain a built-in compact preset on the built-in corpus (cached; compact-mini is shipped pretrained).",
        description="Make sure a built-in compact preset is pretrained. compact-mini ships pretrained in presets/models/ and is "
                    "used as it is; other presets are pretrained once into <runs>/_builtin/<preset>/. A copy in the runs "
                    "folder wins over the shipped one.")
    p.add_argument("preset", nargs="?", default="compact-mini")
    p.add_argument("--rebuild", action="store_true",
                   help="Pretrain again from scratch into <runs>/_builtin/<preset>/ (used from then on instead of the shipped copy).")
    p.add_argument("--ship", action="store_true",
                   help="For maintainers: pretrain again and write the result to presets/models/<preset>/ with its recorded.json "
                        "(recipe, date, eval loss): the copy the repository ships.")
    p.add_argument("--store", choices=["fp16", "bf16", "fp32"], default="fp16",
                   help="With --ship: the precision the shipped weights are stored in (the eval loss of each is recorded).")
    p.set_defaults(func=cmd_prepare_builtin)

    p = sub.add_parser("ship-example", help="Copy a finished full fine-tune into presets/models/NAME (16-bit, model card, recorded.json): "
                                            "a fine-tuned example the playground lists as builtin:NAME.")
    p.add_argument("run", help="Run name under the runs directory (a finished full fine-tune).")
    p.add_argument("name", help="Folder name under presets/models, e.g. compact-mini-dates.")
    p.add_argument("--store", choices=["fp16", "bf16", "fp32"], default="fp16", help="Precision the weights are stored in.")
    p.add_argument("--command", default="", help="How the run was made, recorded in recorded.json.")
    p.set_defaults(func=cmd_ship_example)

    p = sub.add_parser("bench", help="Score a model or a run on benchmarks with lm-evaluation-harness (before/after, per task).",
                       description="Run lm-evaluation-harness tasks (presets/benchmarks.yaml) on a model or a run, and on the run's base; "
                                   "results per task in <run>/benchmarks/results/ or <runs>/_benchmarks/. Needs requirements-eval.txt.")
    add_dataclass_args(p, BenchConfig)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("mix", help="Mix the adapters of two or more finished LoRA runs on one base into a new run (TIES, DARE, SVD...).")
    p.add_argument("--run-dir", default=None, help="Make the mix prepared in this run folder (how the app starts it).")
    add_dataclass_args(p, MixConfig)
    p.set_defaults(func=cmd_mix)

    add_export_parsers(sub)

    p = sub.add_parser("runs", help="List runs and their state.")
    p.set_defaults(func=cmd_runs)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


__all__ = ["main", "build_parser", "add_dataclass_args", "to_dict"]
