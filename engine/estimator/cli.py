"""`python -m engine estimate`: the memory estimator on the command line, one query or a JSONL file of them.

    python -m engine estimate --model llama-3.1-8b --task qlora --seq-len 2048 --grad-ckpt
    python -m engine estimate --model Qwen/Qwen2.5-7B --task inference --weight-precision nf4 --json
    python -m engine estimate --model gpt2 --task full --tier t4-16gb        # + largest batch/sequence, make it fit
    python -m engine estimate --queries sweep.jsonl --out results.jsonl

Flags are generated from the MemoryQuery dataclass (engine/config.py), so they always match the UI form and the
JSONL query keys. With --queries every input line is one JSON object (keys as the flags, with underscores; all but
`model` optional) and every output line is one JSON result in the same order; a line that cannot be estimated
gives {"line": N, "error": ..., "field": ...} and the file goes on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from ..config import MemoryQuery
from ..errors import ConfigError, EngineError
from ..fields import field_specs, from_dict

_META_KEYS = ("id",)  # echoed back in the result, not part of the query


def add_estimate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `estimate` subcommand on an argparse subparsers object."""
    p = subparsers.add_parser(
        "estimate",
        help="Estimate peak GPU memory of inference / LoRA / QLoRA / full fine-tuning (no GPU needed).",
        description=__doc__.split("\n\n")[0],
        epilog="Query format: " + ", ".join(s.name for s in field_specs(MemoryQuery)) + ". Results: allocated_gib, total_gib, "
        "breakdown_gib, details_gib, band (80%% range of allocated/total from the leave-one-source-out error, with the number "
        "of measurements), params, trainable_params, tiers (fits|tight|no; tight = the band straddles the card), notes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = p.add_argument_group("query (MemoryQuery fields)")
    for spec in field_specs(MemoryQuery):
        flag = "--" + spec.name.replace("_", "-")
        # argparse formats help with %: a literal "30%" would print the action's whole dict
        kwargs: dict[str, Any] = {"dest": spec.name, "default": None, "help": f"{spec.help} (default: {spec.default})".replace("%", "%%")}
        if spec.type is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = str  # converted and validated by MemoryQuery, whose errors name the field
            kwargs["metavar"] = "{" + ",".join(spec.choices) + "}" if spec.choices else spec.type.__name__.upper()
        group.add_argument(flag, **kwargs)
    p.add_argument("--json", action="store_true", help="Print the result as JSON (the --queries result format).")
    p.add_argument("--queries", metavar="FILE", help="JSONL file: one query object per line; writes one JSON result per line.")
    p.add_argument("--out", metavar="FILE", help="Write --queries results to FILE instead of stdout.")
    p.add_argument("--tier", metavar="NAME", help="Hardware tier for the largest batch / sequence that fit and 'make it fit' (see --list-tiers).")
    p.add_argument("--list-models", action="store_true", help="List the built-in presets and catalog models, then exit.")
    p.add_argument("--list-tiers", action="store_true", help="List the hardware tiers, then exit.")
    p.set_defaults(func=run_estimate)
    return p


def run_estimate(args: argparse.Namespace) -> int:
    """Run the subcommand; EngineError propagates to the CLI (one clear line, exit status 2)."""
    from . import memory

    if args.list_models:
        for entry in memory.catalog():
            print(f"{entry.name:24s} {entry.hf_id:40s} {entry.params / 1e9:7.2f}B  {entry.source}")
        for name in memory.model_choices():
            if name.startswith("builtin:"):
                print(f"{name:24s} (built-in compact model)")
        return 0
    if args.list_tiers:
        for t in memory.hardware_tiers():
            print(f"{t.name:12s} {t.usable_gib:6.1f} / {t.total_gib:5.1f} GiB  bf16={'yes' if t.bf16 else 'no ':3s}  {t.label}")
        return 0
    if args.tier:
        memory.tier_by_name(args.tier)  # fail early with the list of names
    if args.queries:
        return _run_queries(Path(args.queries), args.out, args.tier)

    given = {spec.name: getattr(args, spec.name) for spec in field_specs(MemoryQuery) if getattr(args, spec.name, None) is not None}
    query = from_dict(MemoryQuery, given)
    est = memory.estimate(query)
    result = est.to_json()
    if args.tier:
        result.update(_tier_info(query, args.tier))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_human(est, result, args.tier))
    return 0


def _tier_info(query: MemoryQuery, tier: str) -> dict[str, Any]:
    from . import memory

    sugg = memory.make_it_fit(query, tier)
    card = memory.tier_by_name(tier)
    need, paged = memory.need_gib(query, card)
    return {
        "tier": tier,
        # what this card's nvidia-smi would show: allocated + reserve + this card generation's CUDA context + paged state
        "need_on_tier_gib": round(need + paged, 4),
        "resident_on_tier_gib": round(need, 4),  # what must stay on the card: the verdict's basis (paged state can page out)
        "verdict_on_tier": memory.tier_verdict(query, card),
        "max_batch": memory.max_batch(query, tier),
        "max_seq_len": memory.max_seq_len(query, tier),
        "make_it_fit": [
            {"rank": s.rank, "description": str(s.description), "changes": s.changes, "new_total_gib": s.new_total_gib, "cost": str(s.cost),
             "verdict": s.verdict}
            for s in sugg
        ],
    }


def _run_queries(path: Path, out: str | None, tier: str | None) -> int:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EngineError(f"Cannot read the queries file {path}: {exc.strerror}.") from None
    except UnicodeDecodeError:
        raise EngineError(f"The queries file {path} is not UTF-8 text.") from None
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            _write_results(lines, fh, tier)
    else:
        _write_results(lines, sys.stdout, tier)
    return 0


def _write_results(lines: list[str], fh: TextIO, tier: str | None) -> None:
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fh.write(json.dumps(answer_query_line(text, number, tier)) + "\n")
        fh.flush()


def answer_query_line(text: str, number: int = 1, tier: str | None = None) -> dict[str, Any]:
    """The JSON result for one JSONL query line: the estimate, or an error object naming the field."""
    from . import memory

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"line": number, "error": f"line {number}: not valid JSON: {exc.msg} (column {exc.colno})", "field": None}
    except RecursionError:
        return {"line": number, "error": f"line {number}: the JSON is nested too deeply to read", "field": None}
    if not isinstance(data, dict):
        return {"line": number, "error": "a query must be a JSON object", "field": None}
    meta = {k: data.pop(k) for k in _META_KEYS if k in data}
    known = {spec.name for spec in field_specs(MemoryQuery)}
    unknown = sorted(k for k in data if k not in known)
    for k in unknown:
        data.pop(k)
    try:
        query = memory.query_from_json(data)
        result = memory.estimate(query).to_json()
        if tier:
            result.update(_tier_info(query, tier))
    except ConfigError as exc:
        return {"line": number, **meta, "error": str(exc), "field": exc.field}
    except EngineError as exc:
        return {"line": number, **meta, "error": str(exc), "field": "model" if "model" in str(exc).lower() or "config" in str(exc).lower() else None}
    except (RecursionError, TypeError, ValueError, OverflowError) as exc:  # a value of the wrong shape: one line's error, not the run's end
        return {"line": number, **meta, "error": f"line {number}: cannot be used ({type(exc).__name__})", "field": None}
    result = {**meta, **result}
    if unknown:
        result["warnings"] = [f"unknown key {k!r} ignored (known keys: {', '.join(sorted(known))})" for k in unknown]
    return result


def _human(est: Any, result: dict[str, Any], tier: str | None) -> str:
    from .memory import breakdown_rows, detail_rows, paging_seconds

    q = est.query
    lines = [
        f"{est.model}: {est.params / 1e6:,.1f}M parameters, {est.trainable_params / 1e6:,.2f}M trainable; task {q.task}, batch {q.batch} "
        f"(effective {est.effective_batch}), sequence {q.seq_len}" + (f" + {q.new_tokens} new tokens" if q.task == "inference" else ""),
        f"peak ({est.phase}): {est.allocated_gib:.2f} GiB allocated by PyTorch, {est.total_gib:.2f} GiB as nvidia-smi shows it",
        "",
    ]
    if est.band is not None and est.band.n:
        lo, hi = est.range_gib(est.allocated_gib)
        lines.insert(2, f"80% band: {lo:.2f}-{hi:.2f} GiB allocated ({est.band.basis})")
    if q.distributed != "none" and q.gpus > 1 and q.task != "inference":
        lines.insert(1, f"per GPU: {q.distributed} on {q.gpus} GPUs (every figure and verdict below is one GPU's)")
    if est.pageable_gib > 0:
        lines.insert(-1, f"must stay on the GPU: {est.resident_gib:.2f} GiB (the verdict's basis); can page out to CPU RAM: "
                         f"{est.pageable_gib:.2f} GiB of paged optimizer state")
    for term, gib, _why in breakdown_rows(est):
        if gib:
            lines.append(f"  {term:24s} {gib:9.3f} GiB")
    for name, gib in detail_rows(est):
        lines.append(f"    inside: {name}: {gib:.3f} GiB")
    lines.append("")
    lines.append("  " + "  ".join(f"{name}: {verdict}" for name, verdict in est.tiers.items()))
    if tier:
        lines.append("")
        lines.append(f"On {tier}: largest batch {result['max_batch']} (at sequence {q.seq_len}), longest sequence {result['max_seq_len']} (at batch {q.batch}).")
        out = est.paged_out_gib.get(tier, 0.0)
        if out > 0:
            lines.append(f"  {out:.2f} GiB of paged optimizer state will live in CPU RAM there: about {paging_seconds(out):.1f} s more per "
                         "optimizer step (PCIe at 12 GB/s), slower but not out of memory.")
        for s in result["make_it_fit"]:
            lines.append(f"  {s['rank']}. {s['description']} -> {s['new_total_gib']:.2f} GiB ({s['cost']})")
    for note in est.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
