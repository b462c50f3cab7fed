"""The measured architectures of the catalog's models, kept as data (presets/catalog_arch.json).

`architecture.analyze` counts a model exactly by building it on the meta device, which needs torch and
transformers: ~3 s of imports for a one-line answer. The catalog's models never change, so their `Arch` is
measured once, written here, and read back in milliseconds; `python -m engine estimate` then answers for a
catalog model or a built-in preset without importing torch. Each entry carries a fingerprint of the catalog
config it was measured from, of the `Arch` fields and of architecture.py, so an edited catalog entry or a change
to the measuring code is measured again (and a test fails until the file is refreshed):

    python -c "from engine.estimator.model_config import refresh_arch_cache; refresh_arch_cache()"
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .architecture import Arch, LinearSpec
from .catalog import PRESETS_DIR, CatalogEntry, catalog

CACHE_FILE = PRESETS_DIR / "catalog_arch.json"


@functools.cache
def _measuring_code() -> str:
    """A hash of the code that measures an architecture (architecture.py): a change to it re-measures everything."""
    return hashlib.sha256(Path(inspect.getfile(Arch)).read_bytes()).hexdigest()


def fingerprint(entry: CatalogEntry) -> str:
    """What a cached `Arch` depends on: the entry's config, name, source, published size, the Arch fields and the
    code that measures it."""
    fields = [f.name for f in dataclasses.fields(Arch)] + [f.name for f in dataclasses.fields(LinearSpec)]
    text = json.dumps([entry.name, entry.hf_id, entry.source, entry.params, dict(entry.config), fields, _measuring_code()],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def arch_to_dict(arch: Arch) -> dict[str, Any]:
    return dataclasses.asdict(arch)


def arch_from_dict(data: dict[str, Any]) -> Arch:
    data = dict(data)
    data["linears"] = tuple(LinearSpec(**lin) for lin in data["linears"])
    data["notes"] = tuple(data.get("notes") or ())
    return Arch(**data)


@functools.cache
def _entries() -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(Path(CACHE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cached_arch(entry: CatalogEntry) -> Arch | None:
    """The measured `Arch` of a catalog entry, or None when it is missing or stale (then the caller measures)."""
    item = _entries().get(entry.name)
    if not isinstance(item, dict) or item.get("fingerprint") != fingerprint(entry):
        return None
    try:
        return arch_from_dict(item["arch"])
    except (KeyError, TypeError):
        return None


def write_cache(measure: Callable[[CatalogEntry], Arch], path: Path = CACHE_FILE) -> int:
    """Measure every catalog model with `measure` (the meta-device count) and write the file; returns the count."""
    out = {}
    for entry in catalog():
        out[entry.name] = {"fingerprint": fingerprint(entry), "arch": arch_to_dict(measure(entry))}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    _entries.cache_clear()
    return len(out)
