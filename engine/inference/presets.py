"""The named decoding presets of presets/generation.yaml (greedy, balanced, creative...): read, checked and applied.

Data only (no torch): the page lists the presets while it is built, without importing the generation stack.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from ..config import GenerationSettings
from ..errors import ConfigError, EngineError
from ..estimator.catalog import PRESETS_DIR
from ..fields import from_dict, to_dict

GENERATION_PRESETS_FILE = PRESETS_DIR / "generation.yaml"


@functools.cache
def _load_presets() -> dict[str, dict[str, Any]]:
    import yaml

    name = GENERATION_PRESETS_FILE.name
    try:
        data = yaml.safe_load(GENERATION_PRESETS_FILE.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise EngineError(key="error.inference.presets_unreadable", file=name, detail=str(exc)) from exc
    presets = data.get("presets") if isinstance(data, dict) else None
    if not isinstance(presets, dict) or not presets:
        raise EngineError(key="error.inference.presets_empty", file=name)
    for key, entry in presets.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("description"), str) or not isinstance(entry.get("settings"), dict):
            raise EngineError(key="error.inference.preset_shape", preset=repr(key), file=name)
        from_dict(GenerationSettings, entry["settings"], where=f"preset {key}: ")  # fail at load, not on click
    return {str(k): {"description": v["description"].strip(), "settings": dict(v["settings"])} for k, v in presets.items()}


def generation_presets() -> dict[str, dict[str, Any]]:
    """Named decoding presets: ``{name: {"description": str, "settings": {field: value}}}`` (a copy: safe to change)."""
    return copy.deepcopy(_load_presets())


def apply_preset(name: str, settings: GenerationSettings | None = None) -> GenerationSettings:
    """`settings` (default: the defaults) with preset `name`'s fields replaced; the fields a preset does not
    name (max new tokens, seed, stop strings) are kept. Raises ConfigError for an unknown name."""
    presets = _load_presets()
    if name not in presets:
        raise ConfigError("preset", name, allowed_key="message.allowed.choices", choices=list(presets))
    base = to_dict(settings if settings is not None else GenerationSettings())
    return from_dict(GenerationSettings, {**base, **presets[name]["settings"]})
