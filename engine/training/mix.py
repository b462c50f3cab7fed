"""Adapters mixed: two or more finished LoRA runs on the same base combined into a new run with peft's own weighted-adapter
methods (`LoraModel.add_weighted_adapter`): linear, TIES, DARE-linear, DARE-TIES, SVD and cat.

The mixed run is a run folder like any other (engine/runs.py): `config.yaml` (the first parent's TrainConfig, marked
LoRA or QLoRA, with the mix's rank), `events.jsonl` (start, the mix, the date-task scores, done), `train.log` and
`adapter/` (peft's adapter with the first parent's tokenizer), so the playground (`run:NAME`), the evaluation, the merge,
the GGUF export and the push treat it like a trained one. `mix.yaml` (MixConfig) names its parents and the method; the
model card reads it (engine/export/card.py) and a failed mix is never "resumed" as a training run (engine/runs.py).

What is refused, before anything is written (`plan_mix`, each a ConfigError naming the field in the visitor's language):
fewer than two runs, a run that does not exist, is not finished, or has no adapter (a full fine-tune); different bases
(compared after following runs that continue another run's adapter, engine/models/references.py); DoRA adapters and
adapters with extra trained modules (`modules_to_save`), which peft cannot combine; and different ranks with linear,
TIES or DARE, which add the adapters' A and B matrices entry by entry (svd and cat combine any ranks).

QLoRA and LoRA parents together are allowed, with a warning: the adapters are small fp32 matrices either way and combine
the same, but a QLoRA adapter was fitted to its base's 4-bit rounding, and that part of it does not carry over to the
16-bit base. Such a mix is recorded as LoRA and loads on the 16-bit base (as a merge does, engine/export/merge.py); a
mix of QLoRA runs with the same 4-bit settings stays QLoRA, loading its base the way its parents trained.

Two corrections to peft 0.21 where its result would not be what the weights say: the new adapter copies the first
parent's rsLoRA flag while its values already hold each parent's scaling, so its own scaling is set back to 1; and for
the same reason the saved config has `lora_alpha == r` without rsLoRA. Linear mixes A and B separately (its cross terms
make it "a rough approximation", peft's docs say); cat is the exact weighted sum of the changes, at the sum of the ranks.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from ..config import QuantSettings, TrainConfig
from ..errors import ConfigError, Phrase
from ..fields import from_dict, to_dict
from ..mix_config import MIX_EQUAL_RANK_METHODS, MixConfig
from ..runs import MIX_FILE, EventLog, atomic_replace_dir, atomic_write_text, load_config, read_events, run_path, save_config, summarize
from .processes import run_is_alive

MIX_ADAPTER = "mix"  # the new adapter's name inside the peft model while it is built


@dataclass
class Parent:
    """One run going into the mix, as read from its folder."""

    name: str
    run_dir: Path
    adapter_dir: Path
    base: str  # where its base's weights are (a folder or a Hub id), after following continued runs
    rank: int
    quant: QuantSettings | None  # how its base was loaded when it trained (None: 16-bit)
    cfg: TrainConfig


@dataclass
class MixPlan:
    """A mix that can be made: its parents, the mixed adapter's rank and base precision, and the warnings to show."""

    cfg: MixConfig
    parents: list[Parent]
    rank: int
    quant: QuantSettings | None
    warnings: list[Phrase] = field(default_factory=list)


def _refuse(field_name: str, value: Any, allowed: str, **params: Any) -> ConfigError:
    return ConfigError(field_name, value, allowed_key=f"mix.allowed.{allowed}", owner="MixConfig", **params)


def _adapter_config(adapter_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _rank(acfg: dict[str, Any]) -> int:
    # peft allocates the mix for the largest rank an adapter uses (its rank_pattern included)
    return max([int(acfg.get("r") or 8), *[int(v) for v in (acfg.get("rank_pattern") or {}).values()]])


def read_parent(name: str, runs_dir: Path) -> Parent:
    """A finished LoRA run as a parent of a mix; ConfigError (field `parents`) saying why it cannot be one."""
    from ..errors import EngineError
    from ..models.references import resolve_model

    run_dir = run_path(runs_dir, name)
    if not (run_dir / "config.yaml").exists():
        raise _refuse("parents", name, "exists")
    summary = summarize(run_dir, alive=run_is_alive(run_dir))
    if summary.state != "finished":
        raise _refuse("parents", name, "finished", state=summary.state)
    adapter_dir = run_dir / "adapter"
    acfg = _adapter_config(adapter_dir)
    if summary.output != "adapter" or not acfg:
        raise _refuse("parents", name, "adapter_run")
    if acfg.get("use_dora") or acfg.get("modules_to_save") or acfg.get("target_parameters") or acfg.get("peft_type", "LORA") != "LORA":
        raise _refuse("parents", name, "plain_lora")
    try:
        source = resolve_model(f"run:{name}", runs_dir, True)
    except EngineError as exc:
        raise _refuse("parents", name, "base_unknown", detail=str(exc)) from None
    return Parent(name, run_dir, adapter_dir, source.location, _rank(acfg), source.run_quant, load_config(run_dir / "config.yaml"))


def _same_quant(a: QuantSettings | None, b: QuantSettings | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.mode, a.quant_type, a.double_quant) == (b.mode, b.quant_type, b.double_quant)


def plan_mix(cfg: MixConfig, runs_dir: Path) -> MixPlan:
    """Check that the runs of `cfg` can be mixed with its method; the plan, or a ConfigError naming the field and why."""
    parents = [read_parent(name, Path(runs_dir)) for name in cfg.parent_list]
    bases = {p.base for p in parents}
    if len(bases) > 1:
        raise _refuse("parents", cfg.parents, "same_base", bases="; ".join(f"{p.name}: {p.cfg.base_model}" for p in parents))
    ranks = [p.rank for p in parents]
    if cfg.combination in MIX_EQUAL_RANK_METHODS and len(set(ranks)) > 1:
        raise _refuse("combination", cfg.combination, "equal_ranks", ranks=", ".join(f"{p.name}: {p.rank}" for p in parents))
    if cfg.combination == "cat":
        rank = sum(ranks)
    elif cfg.combination == "svd":
        rank = cfg.svd_rank or max(ranks)
    else:
        rank = ranks[0]
    warnings: list[Phrase] = []
    quant = parents[0].quant
    if not all(_same_quant(quant, p.quant) for p in parents):
        four_bit = ", ".join(p.name for p in parents if p.quant is not None)
        warnings.append(Phrase("mix.quant_mixed", runs=four_bit))
        quant = None
    return MixPlan(cfg, parents, rank, quant, warnings)


def mixed_train_config(plan: MixPlan, name: str) -> TrainConfig:
    """The mixed run's config.yaml: the first parent's settings, marked LoRA or QLoRA, with the mix's rank (alpha = rank:
    the mixed values already hold each parent's scaling)."""
    first = plan.parents[0].cfg
    lora = dataclasses.replace(first.lora, r=plan.rank, alpha=plan.rank, use_rslora=False, use_dora=False)
    data = to_dict(first)
    data.update(method="qlora" if plan.quant else "lora", run_name=name, lora=to_dict(lora),
                quant=to_dict(plan.quant) if plan.quant else to_dict(QuantSettings(mode="none")))
    return from_dict(TrainConfig, data)


def write_mix_run(plan: MixPlan, run_dir: Path) -> None:
    """The mixed run's folder before its job starts: config.yaml and mix.yaml."""
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(run_dir, mixed_train_config(plan, run_dir.name))
    atomic_write_text(run_dir / MIX_FILE, "# Compact LLM Lab: this run mixes the adapters of other runs (python -m engine mix)\n"
                      + yaml.safe_dump(to_dict(plan.cfg), sort_keys=False, allow_unicode=True))


def read_mix(run_dir: Path) -> MixConfig | None:
    """The MixConfig of a mixed run (None for any other run, or an unreadable mix.yaml)."""
    try:
        data = yaml.safe_load((Path(run_dir) / MIX_FILE).read_text(encoding="utf-8"))
        return from_dict(MixConfig, data) if isinstance(data, dict) else None
    except (OSError, yaml.YAMLError, ConfigError):
        return None


def combine(model: Any, names: list[str], plan: MixPlan) -> None:
    """Add the mixed adapter `MIX_ADAPTER` to a peft model holding the parents' adapters as `names` (peft's method)."""
    from peft.tuners.lora import LoraLayer

    cfg = plan.cfg
    kwargs: dict[str, Any] = {"combination_type": cfg.combination}
    if cfg.combination in ("ties", "dare_linear", "dare_ties"):
        kwargs["density"] = cfg.density
    if cfg.combination == "svd":
        kwargs["svd_rank"] = plan.rank
    model.add_weighted_adapter(names, cfg.weight_list, MIX_ADAPTER, **kwargs)
    model.peft_config[MIX_ADAPTER].use_rslora = False  # see the module docstring: the values already hold the scaling
    for module in model.modules():
        if isinstance(module, LoraLayer) and MIX_ADAPTER in module.scaling:
            module.scaling[MIX_ADAPTER] = 1.0


def run_mix(run_dir: Path, runs_dir: Path) -> dict[str, Any]:
    """The mix job (`python -m engine mix --run-dir RUN`): load the base once with every parent's adapter, combine them,
    save `adapter/`, score the date task on the base, each parent and the mix (MixConfig.score), and write `done`."""
    from ..hardware.device import detect_device
    from ..models.loading import has_tokenizer, load_model

    run_dir, runs_dir = Path(run_dir), Path(runs_dir)
    cfg = read_mix(run_dir)
    if cfg is None:
        raise _refuse("config", str(run_dir / MIX_FILE), "file")
    plan = plan_mix(cfg, runs_dir)
    device = detect_device()
    events = EventLog(run_dir / "events.jsonl")
    started = time.time()
    tcfg = load_config(run_dir / "config.yaml")
    events.write("start", run=run_dir.name, method=tcfg.method, base_model=tcfg.base_model, dataset=tcfg.dataset, resumed_from=None,
                 device=device.name, device_kind=device.kind, dtype="float32" if device.kind == "cpu" else "auto")
    for warning in plan.warnings:
        print(f"warning: {warning}", flush=True)
    first = plan.parents[0]
    events.write("phase", phase=f"loading {first.cfg.base_model}")
    # on a CPU in fp32, as a merge is (engine/export/merge.py): the adapters combine and score without bf16 rounding
    loaded = load_model(f"run:{first.name}", plan.quant or QuantSettings(mode="none"), runs_dir=runs_dir, allow_local_paths=True, device=device,
                        dtype=torch.float32 if device.kind == "cpu" and plan.quant is None else None)
    model, names = loaded.model, ["default"]
    for i, parent in enumerate(plan.parents[1:], start=1):
        model.load_adapter(str(parent.adapter_dir), adapter_name=f"p{i}", is_trainable=False)
        names.append(f"p{i}")
    events.write("phase", phase=f"mixing the adapters of {', '.join(p.name for p in plan.parents)} with {cfg.combination}")
    combine(model, names, plan)
    events.write("mix", parents=[p.name for p in plan.parents], combination=cfg.combination, weights=cfg.weight_list,
                 density=cfg.density if cfg.combination in ("ties", "dare_linear", "dare_ties") else None, rank=plan.rank,
                 quant="4bit" if plan.quant else "none", warnings=[str(w) for w in plan.warnings])
    events.write("phase", phase="saving")
    tmp = run_dir / ".adapter.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), selected_adapters=[MIX_ADAPTER])  # peft writes a non-default adapter in a subfolder
    if has_tokenizer(first.adapter_dir):
        for f in first.adapter_dir.iterdir():
            if f.is_file() and not f.name.startswith(("adapter_", "README")):
                shutil.copy2(f, tmp / MIX_ADAPTER / f.name)
    else:
        loaded.tokenizer.save_pretrained(str(tmp / MIX_ADAPTER))
    atomic_replace_dir(tmp / MIX_ADAPTER, run_dir / "adapter")
    shutil.rmtree(tmp, ignore_errors=True)
    if cfg.score:
        score_mix(model, loaded.tokenizer, plan, run_dir.name, names, events)
    return events.write("done", output="adapter", path=str(run_dir / "adapter"), steps=0, rank=plan.rank, peak_gib=None,
                        duration_s=round(time.time() - started, 1))


def score_mix(model: Any, tokenizer: Any, plan: MixPlan, name: str, names: list[str], events: EventLog) -> None:
    """The date task on the base (`task_score` before), each parent (`mix_score`) and the mix (`task_score` after, and
    `mix_score`), in this one process on the same loaded base, so that the numbers compare."""
    from ..inference.tasks import date_items, evaluate_task

    items = date_items("test")
    model.eval()

    def score(label: str) -> dict[str, Any]:
        events.write("phase", phase=f"scoring the date task on {label}")
        t0 = time.monotonic()

        def progress(done: int, total: int) -> None:
            elapsed = time.monotonic() - t0
            events.write("task_progress", when=label, done=done, total=total, elapsed_s=round(elapsed, 1),
                         eta_s=round(elapsed / done * (total - done), 1) if done else None)

        result = evaluate_task(model, tokenizer, items, on_progress=progress)
        return {"accuracy": result.accuracy, "n": result.n, "seconds": round(time.monotonic() - t0, 1),
                "examples": [list(e) for e in result.examples[:3]], "misses": [list(e) for e in result.misses[:3]]}

    with model.disable_adapter():
        events.write("task_score", when="before", **score("base"))
    for parent, adapter in zip(plan.parents, names, strict=True):
        model.set_adapter(adapter)
        events.write("mix_score", run=parent.name, **score(parent.name))
    model.set_adapter(MIX_ADAPTER)
    mixed = score(name)
    events.write("task_score", when="after", **mixed)
    events.write("mix_score", run=name, **mixed)


def mix_scores(run_dir: Path) -> dict[str, float]:
    """The date-task accuracy of each model a mix job scored: "base", each parent's name and the mix's own name."""
    out: dict[str, float] = {}
    for ev in read_events(run_dir):
        if ev.get("type") == "task_score" and ev.get("when") == "before" and ev.get("accuracy") is not None:
            out["base"] = float(ev["accuracy"])
        elif ev.get("type") == "mix_score" and ev.get("accuracy") is not None:
            out[str(ev.get("run"))] = float(ev["accuracy"])
    return out
