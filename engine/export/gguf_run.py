"""GGUF export of a run or a built-in model: which folder is written, the export into the exports folder, the zip.

A run's GGUF comes from its full model (full / scratch runs: `model/`) or from its merged model (LoRA / QLoRA runs:
`merged/`, merged first when there is none or when it is older than the adapter: a GGUF of a stale merge would
silently be the wrong model). `builtin:NAME` exports the pretrained built-in compact model. `gguf_check` says,
without writing anything, whether a run can be exported and why not, so the page can say it before the click.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import GgufSettings
from ..errors import ConfigError, EngineError, Phrase
from ..refs import BUILTIN_PREFIX, MERGED_SUFFIX, RUN_PREFIX
from .gguf import GgufResult, export_gguf, gguf_support
from .merge import zip_export

__all__ = ["export_ref_gguf", "gguf_check", "gguf_source", "zip_export"]


def _newest_mtime(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=0.0)


def _split_ref(ref: str) -> tuple[str, str]:
    """('builtin' | 'run', name) of builtin:NAME, run:NAME, run:NAME/merged or a bare run name."""
    ref = (ref or "").strip()
    if not ref:
        raise EngineError(key="error.export.pick_run")
    if ref.startswith(BUILTIN_PREFIX):
        return "builtin", ref[len(BUILTIN_PREFIX):]
    if ref.startswith(RUN_PREFIX):
        ref = ref[len(RUN_PREFIX):]
    return "run", ref.removesuffix(MERGED_SUFFIX)


def _finished_run(runs_dir: Path, name: str) -> Path:
    """The folder of finished run `name`; EngineError when there is no such run or it has not finished."""
    from ..runs import run_path
    from .card import run_events

    run_dir = run_path(Path(runs_dir), name)
    if not (run_dir / "config.yaml").exists() and not (run_dir / "events.jsonl").exists():
        raise EngineError(key="error.export.no_run", run=name)
    summary, _ = run_events(run_dir)
    if summary.state != "finished":
        raise EngineError(key="error.export.unfinished", run=name, state=Phrase(f"finetune.state.{summary.state}"))
    return run_dir


def gguf_source(ref: str, runs_dir: Path, *, merge: bool = True) -> tuple[Path, str]:
    """(model folder to write, a name for the file) for a reference; merges a LoRA run first when needed (merge=True).

    Raises EngineError saying what is missing (an unfinished run, a built-in model not pretrained yet, ...).
    """
    from ..models.references import builtin_weights_dir

    kind, name = _split_ref(ref)
    runs_dir = Path(runs_dir)
    if kind == "builtin":
        folder = builtin_weights_dir(name, runs_dir)
        if folder is None:
            raise EngineError(key="error.export.builtin_not_pretrained", name=name)
        return folder, name
    run_dir = _finished_run(runs_dir, name)
    if (run_dir / "model" / "config.json").exists():
        return run_dir / "model", name
    adapter, merged = run_dir / "adapter", run_dir / "merged"
    if not (adapter / "adapter_config.json").exists():
        raise EngineError(key="error.export.nothing", run=name)
    fresh = (merged / "config.json").exists() and _newest_mtime(merged) >= _newest_mtime(adapter)
    if not fresh:
        if not merge:
            raise EngineError(key="error.export.merge_first", run=name)
        from .merge import merge_adapter

        merge_adapter(run_dir, runs_dir=runs_dir)
    return merged, name


def gguf_check(ref: str, runs_dir: Path) -> str | None:
    """None when `ref` can be exported to GGUF now; otherwise the reason (nothing is merged or written)."""
    from ..models.references import read_run_base

    try:
        kind, name = _split_ref(ref)
        folder = None
        if kind == "builtin":
            folder, _ = gguf_source(ref, runs_dir)
        else:
            run_dir = _finished_run(runs_dir, name)
            if (run_dir / "model" / "config.json").exists():
                folder = run_dir / "model"
            elif (run_dir / "merged" / "config.json").exists():
                folder = run_dir / "merged"
        if folder is not None:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        else:  # an adapter run not merged yet: judge by its base model's config, when it is local
            base, _ = read_run_base(Path(runs_dir) / name)
            if not base or not base.startswith((BUILTIN_PREFIX, RUN_PREFIX)):
                return None  # a Hub base (or none recorded): its config is checked when the merged model exists
            base_folder, _ = gguf_source(base, runs_dir, merge=False)
            config = json.loads((base_folder / "config.json").read_text(encoding="utf-8"))
    except EngineError as exc:  # the reason in the page's language when it has a key
        return Phrase(exc.key, **exc.params) if exc.key and not isinstance(exc, ConfigError) else str(exc)
    except (OSError, json.JSONDecodeError) as exc:
        return str(exc)
    return gguf_support(config)


def export_ref_gguf(ref: str, runs_dir: Path, settings: GgufSettings | None = None, *, out_dir: Path | None = None) -> GgufResult:
    """Export a run (run:NAME or NAME) or builtin:NAME to `<runs>/_exports/gguf-<name>-<type>/` (default) and record it
    in the run's events; returns what was written."""
    settings = settings or GgufSettings()
    folder, name = gguf_source(ref, runs_dir)
    out_dir = Path(out_dir) if out_dir else Path(runs_dir) / "_exports" / f"gguf-{name}-{settings.type}"
    result = export_gguf(folder, out_dir, settings, name=name)
    run_dir = Path(runs_dir) / name
    if _split_ref(ref)[0] == "run" and (run_dir / "events.jsonl").exists():
        from ..runs import EventLog

        EventLog(run_dir / "events.jsonl").write("export", format="gguf", gguf_type=settings.type, file=result.gguf_path.name,
                                                 bytes=result.bytes, seconds=round(result.seconds, 3))
    return result
