"""Preset data for the estimator and the fine-tune form: hardware tiers, the model catalog, training recipes,
and the numbers of the built-in compact presets.

The data lives in YAML under `presets/` (data, not code, each record with its source); this module only
loads, validates and looks it up. Files are read once per process (cached): they are part of the install.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import EngineError

PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"


@dataclass(frozen=True)
class HardwareTier:
    """A class of machine the verdict is given for. Memory in GiB (2**30 bytes), as nvidia-smi's MiB / 1024."""

    name: str
    label: str
    kind: str  # "gpu" | "cpu"
    total_gib: float  # what nvidia-smi reports as the card's total (or the machine's RAM)
    usable_gib: float  # what a training/inference process can really get (display, driver, ECC, OS taken off)
    bf16: bool  # native bf16 (Ampere and newer); T4/Turing/Pascal need fp16
    cuda_context_gib: float  # memory the process holds outside PyTorch's allocator (CUDA context, cuBLAS; CPU: runtime)
    examples: str = ""
    source: str = ""


@dataclass(frozen=True)
class CatalogEntry:
    """One model of presets/models.yaml: exact config numbers plus the published parameter count."""

    name: str
    hf_id: str
    params: float  # published count
    params_exact: bool
    source: str
    config: dict[str, Any]
    aliases: tuple[str, ...] = ()
    params_source: str = ""


@dataclass(frozen=True)
class Recipe:
    """A suggested training setup for a hardware tier (used by the fine-tune form's hardware presets)."""

    tier: str
    name: str
    description: str
    settings: dict[str, Any] = field(default_factory=dict)


def _load_yaml(name: str) -> Any:
    path = PRESETS_DIR / name
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise EngineError(key="error.estimator.cannot_read", file=str(path), detail=str(exc)) from exc


@functools.lru_cache(maxsize=1)
def hardware_tiers() -> list[HardwareTier]:
    """Hardware tiers in presets/hardware.yaml, smallest first."""
    data = _load_yaml("hardware.yaml")
    tiers = [HardwareTier(**{k: v for k, v in row.items() if k in HardwareTier.__dataclass_fields__}) for row in data["tiers"]]
    for t in tiers:
        if not (0 < t.usable_gib <= t.total_gib) or t.kind not in ("gpu", "cpu"):
            raise EngineError(key="error.estimator.tier_numbers", tier=t.name)
    return tiers


def tier_by_name(name: str) -> HardwareTier:
    """The tier called `name` (case-insensitive); EngineError listing the names otherwise."""
    for t in hardware_tiers():
        if t.name.lower() == str(name).strip().lower():
            return t
    from ..errors import ConfigError

    raise ConfigError("tier", name, allowed_key="message.allowed.choices", choices=[t.name for t in hardware_tiers()])


@functools.lru_cache(maxsize=1)
def catalog() -> list[CatalogEntry]:
    """The model catalog (presets/models.yaml), in file order (grouped by family, small to large)."""
    entries = []
    for row in _load_yaml("models.yaml"):
        entries.append(
            CatalogEntry(
                name=row["name"], hf_id=row["hf_id"], params=float(row["params"]), params_exact=bool(row.get("params_exact", True)),
                source=row["source"], config=dict(row["config"]), aliases=tuple(row.get("aliases", ())),
                params_source=row.get("params_source", "safetensors parameter count on the model page"),
            )
        )
    return entries


_SUFFIXES = re.compile(r"(-(instruct|chat|hf|it|base|gptq|awq|int4|int8|bnb-4bit|4bit|8bit|fp16|bf16))+$")


@functools.lru_cache(maxsize=1)
def _catalog_index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for e in catalog():
        for key in (e.name, e.hf_id, *e.aliases):
            index.setdefault(key.lower(), e)
    for e in catalog():  # looser keys last so that exact names always win
        for key in (e.name, e.hf_id, *e.aliases):
            index.setdefault(_normalize(key), e)
    for e in catalog():  # the loosest: how people write a name ("Llama 3.1 8B", "Qwen 2.5 1.5B Instruct")
        for key in (e.name, e.hf_id, *e.aliases):
            index.setdefault(loose_key(key), e)
    return index


def _normalize(ref: str) -> str:
    base = ref.lower().rsplit("/", 1)[-1].replace("_", "-").replace("meta-llama-", "llama-")
    return "~" + _SUFFIXES.sub("", base)


# Words a person may put around a model's name that do not change its architecture (the owner, a variant).
_LOOSE_DROP = {"meta", "instruct", "chat", "hf", "it", "base", "gptq", "awq", "bnb", "fp16", "bf16"}
_LOOSE_TOKENS = re.compile(r"\d+(?:\.\d+)*|[a-z]+")


def loose_key(text: str) -> str:
    """A model name as people write it, reduced to its words and numbers: case, spaces, punctuation and the place where
    letters meet digits do not matter ("Llama 3.1 8B", "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct" all give
    "llama 3.1 8 b"); the Hub owner and variant words (instruct, chat, hf...) are dropped."""
    name = str(text).strip().lower().rsplit("/", 1)[-1]
    words = [w for w in _LOOSE_TOKENS.findall(name) if w not in _LOOSE_DROP]
    return "≈" + " ".join(words)


def display_name(entry: CatalogEntry) -> str:
    """How the model's own page writes its name (the Hub repo, dashes as spaces): "Llama 3.1 8B", "Qwen2.5 1.5B"."""
    name = entry.hf_id.rsplit("/", 1)[-1].replace("-", " ").replace("_", " ")
    return name[:-3] if name.lower().endswith(" hf") else name  # "Llama 2 7b hf": the -hf of a converted checkpoint


def choice_label(entry: CatalogEntry) -> str:
    """The model list's label: the display name and the catalog name, so that a dropdown filtering on the label (gradio
    matches a substring, ignoring case) finds the model by either spelling."""
    shown = display_name(entry)
    return entry.name if shown.lower() == entry.name.lower() else f"{shown} · {entry.name}"


def catalog_lookup(ref: str) -> CatalogEntry | None:
    """The catalog entry for a name, Hub id or alias (instruct/chat/quantized variants share the architecture), written
    exactly, or loosely as people write names (loose_key)."""
    index = _catalog_index()
    ref = str(ref).strip()
    if not ref:
        return None
    return index.get(ref.lower()) or index.get(_normalize(ref)) or index.get(loose_key(ref))


@functools.lru_cache(maxsize=1)
def recipes() -> list[Recipe]:
    """Training recipes per hardware tier (presets/recipes.yaml)."""
    out = []
    for row in _load_yaml("recipes.yaml")["recipes"]:
        out.append(Recipe(tier=row["tier"], name=row["name"], description=row["description"], settings=dict(row.get("settings", {}))))
    return out


@functools.lru_cache(maxsize=1)
def _learning_rates() -> dict[str, Any]:
    return dict(_load_yaml("recipes.yaml").get("learning_rates") or {})


def method_learning_rate(method: str, model: str = "") -> float:
    """The peak learning rate of a training method (presets/recipes.yaml learning_rates): the built-in compact models' own
    where measured, else the method's (LoRA and QLoRA 2e-4, full 2e-5); TrainConfig's default for a method without one."""
    rates = _learning_rates()
    if model.startswith("builtin:") and method in (rates.get("builtin") or {}):
        return float(rates["builtin"][method])
    if isinstance(rates.get(method), (int, float)):
        return float(rates[method])
    from ..config import TrainConfig

    return float(TrainConfig.__dataclass_fields__["learning_rate"].default)


def recipes_for(tier_name: str) -> list[Recipe]:
    """The recipes suggested for one tier."""
    return [r for r in recipes() if r.tier == tier_name]


@functools.lru_cache(maxsize=1)
def compact_presets() -> dict[str, dict[str, Any]]:
    """The built-in CompactLLM presets (presets/compact.yaml) as written: architecture numbers, description, pretrain_*.

    Read as data here so that the estimator never imports the model code (engine/models/compact.py reads the same file).
    """
    return _load_yaml("compact.yaml")
