"""The process-wide cache of loaded models, so the playground does not reload on every message.

`ModelCache` keeps loaded models (engine/models/loading.py `load_model`) under a lock, least recently used
unloaded first. `MODEL_CACHE` is the one process-wide instance: it is shared by every browser session and
thread, and guarded by its lock.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import QuantSettings
from ..hardware.device import DeviceInfo
from .loading import LoadedModel, load_model

log = logging.getLogger(__name__)

CacheKey = tuple[Any, ...]


@dataclass
class CacheEntry:
    key: CacheKey
    loaded: LoadedModel
    last_used: float


class ModelCache:
    """Process-wide cache of loaded models, shared by all browser sessions and threads.

    Keeps at most `max_models` models (least recently used is unloaded first). The default of one is
    deliberate: a small GPU holds one model, and loading a second before freeing the first is the classic
    playground OOM. Loads run under the lock, so two sessions asking for the same model load it once and
    two different loads never compete for memory (the eviction happens before the load, so a failed load
    leaves the cache empty rather than over-full). Unloading drops the cache's reference; the memory is
    freed once no generation still holds the model.
    """

    def __init__(self, max_models: int = 1, loader: Callable[..., LoadedModel] | None = None) -> None:
        if max_models < 1:
            raise ValueError("max_models must be >= 1")
        self.max_models = max_models
        self._loader = loader or load_model
        self._lock = threading.RLock()
        self._entries: OrderedDict[CacheKey, CacheEntry] = OrderedDict()

    @staticmethod
    def key(
        ref: str,
        quant: QuantSettings | None = None,
        *,
        runs_dir: Path | None = None,
        trust_remote_code: bool = False,
        adapter: str | None = None,
        device: DeviceInfo | None = None,
        allow_local_paths: bool = False,
        dtype: torch.dtype | None = None,
        device_map: str | dict[str, Any] | None = None,
        allow_cpu_repack: bool = False,
        offload_folder: Path | None = None,
        max_memory: dict[int | str, int | str] | None = None,
    ) -> CacheKey:
        """The identity of a load request. allow_local_paths is part of it so that a model loaded by a
        trusted caller is never handed to one that may not name that path."""
        q = None if quant is None else (quant.mode, quant.quant_type, quant.double_quant, quant.compute_dtype)
        dm = json.dumps(device_map, sort_keys=True) if isinstance(device_map, dict) else device_map
        return (
            ref.strip(),
            q,
            str(Path(runs_dir).resolve()) if runs_dir else None,
            trust_remote_code,
            adapter,
            device.kind if device else None,
            allow_local_paths,
            str(dtype) if dtype else None,
            dm,
            allow_cpu_repack,
            str(offload_folder) if offload_folder else None,
            json.dumps({str(k): v for k, v in max_memory.items()}, sort_keys=True) if max_memory else None,
        )

    def get_or_load(self, ref: str, quant: QuantSettings | None = None, **kwargs: Any) -> LoadedModel:
        """The cached model for this request, loading it (and evicting the least recently used) if needed."""
        key = self.key(ref, quant, **kwargs)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.last_used = time.time()
                self._entries.move_to_end(key)
                return entry.loaded
            while len(self._entries) >= self.max_models:
                oldest = next(iter(self._entries))
                self._drop(oldest)
            _free_memory()
            loaded = self._loader(ref, quant, **_loader_kwargs(kwargs))
            self._entries[key] = CacheEntry(key, loaded, time.time())
            return loaded

    def get(self, key: CacheKey) -> LoadedModel | None:
        with self._lock:
            entry = self._entries.get(key)
            return entry.loaded if entry else None

    def unload(self, key_or_ref: CacheKey | str) -> int:
        """Unload one entry (by key) or every entry loaded from a reference (by ref string); returns how many."""
        with self._lock:
            if isinstance(key_or_ref, str):
                keys = [k for k in self._entries if k[0] == key_or_ref.strip()]
            else:
                keys = [key_or_ref] if key_or_ref in self._entries else []
            for k in keys:
                self._drop(k)
            if keys:
                _free_memory()
            return len(keys)

    def unload_all(self) -> int:
        with self._lock:
            n = len(self._entries)
            for k in list(self._entries):
                self._drop(k)
            _free_memory()
            return n

    def loaded(self) -> list[dict[str, Any]]:
        """What is loaded now, most recently used last: ref, where, footprint, quantization, last use."""
        with self._lock:
            return [
                {
                    "key": e.key,
                    "ref": e.loaded.ref,
                    "where": e.loaded.where,
                    "footprint_gib": round(e.loaded.footprint_gib, 3),
                    "quant": e.loaded.quant.mode,
                    "last_used": e.last_used,
                }
                for e in self._entries.values()
            ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _drop(self, key: CacheKey) -> None:
        entry = self._entries.pop(key)
        log.info("unloading %s", entry.loaded.ref)
        entry.loaded = None  # type: ignore[assignment]  # drop our reference before collecting


def _loader_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    defaults = {
        "runs_dir": None,
        "trust_remote_code": False,
        "adapter": None,
        "device": None,
        "allow_local_paths": False,
        "dtype": None,
        "device_map": None,
        "allow_cpu_repack": False,
        "offload_folder": None,
        "max_memory": None,
    }
    unknown = set(kwargs) - set(defaults)
    if unknown:
        raise TypeError(f"unexpected arguments: {sorted(unknown)}")
    return {**defaults, **kwargs}


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# The one shared cache of the process (design.md §7: process-wide objects are explicit and locked).
MODEL_CACHE = ModelCache()
