"""Model references for the memory estimator: which config a reference names, and its `Arch` (cached).

A reference is a built-in compact preset (`builtin:NAME`), a catalog name or Hub id from `presets/models.yaml`
(offline), a path to a `config.json`, a manual architecture (`manual:L=..,h=..,...`, see `arch_from_manual`), or
any other Hugging Face id (only its `config.json` is fetched and cached by huggingface_hub). The config is then
measured by engine/estimator/architecture.py (`analyze`); built-in presets are described from their numbers by
engine/estimator/compact_arch.py, without the model code.

Everything here is cached per reference: the first resolution of a model imports torch/transformers and takes
up to a few seconds, every later estimate is pure arithmetic.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError, Phrase
from ..refs import LOOSE_HUB_ID_RE, check_visitor_path, looks_like_path
from ..sharing import is_shared, token_kwargs
from .arch_cache import cached_arch, write_cache
from .architecture import Arch, analyze
from .catalog import CatalogEntry, catalog_lookup
from .compact_arch import builtin_arch
from .texts import KeyedConfigError, Msg, model_error


def resolve(ref: str) -> Arch:
    """The architecture behind a model reference (cached). Raises ModelLoadError/ConfigError with a clear message."""
    if not isinstance(ref, str) or not ref.strip():
        raise KeyedConfigError("model", ref, Msg("estimator.allowed.model"))
    return _resolve_cached(gate(ref.strip()))


def gate(ref: str) -> str:
    """The gate every estimator entry goes through (page, API, MCP; `resolve` and memory.py `query_key`, before any
    cache): on a shared app a path must be one of the visitor's own uploads, refused alike whether it exists or not
    (engine/refs.py `check_visitor_path`); returned as it is otherwise."""
    if is_shared() and isinstance(ref, str) and looks_like_path(ref.strip()):
        return check_visitor_path(ref.strip(), "model", "config")
    return ref


@functools.lru_cache(maxsize=256)
def _resolve_cached(ref: str) -> Arch:
    if ref.startswith("builtin:"):
        return builtin_arch(ref)
    if ref.startswith("manual:"):
        cfg = _manual_config(ref)
        return analyze(cfg, ref=ref, label=Phrase("error.estimator.label.manual", spec=ref[7:]), source="manual architecture")
    entry = catalog_lookup(ref)
    if entry is not None:
        return _from_catalog(entry, ref)
    path = Path(ref).expanduser()
    # on a shared app a path is known from its spelling alone (engine/refs.py looks_like_path): looking at the disk for
    # a Hub-style name would tell a visitor which folders exist on the server
    if ref.endswith(".json") or (looks_like_path(ref) if is_shared() else (path.is_dir() or path.is_file())):
        return _from_file(path, ref)
    if LOOSE_HUB_ID_RE.match(ref):
        return _from_hub(ref)
    raise model_error("estimator.error.unknown_model", ref=repr(ref))


def _from_catalog(entry: CatalogEntry, ref: str) -> Arch:
    # measured once and kept as data (engine/estimator/arch_cache.py): no torch/transformers import for the catalog
    return cached_arch(entry) or measure_catalog_entry(entry)


def measure_catalog_entry(entry: CatalogEntry) -> Arch:
    """A catalog model's `Arch`, counted on the meta device from its config (needs torch and transformers)."""
    cfg = config_from_dict(dict(entry.config), where=f"catalog entry {entry.name}")
    return analyze(cfg, ref=entry.name, label=f"{entry.name} ({entry.hf_id})", source=entry.source, published=entry.params)


def refresh_arch_cache() -> int:
    """Re-measure every catalog model and rewrite presets/catalog_arch.json (after editing presets/models.yaml)."""
    return write_cache(measure_catalog_entry)


def _from_file(path: Path, ref: str) -> Arch:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ModelLoadError(key="error.estimator.no_config_file", path=repr(str(path)))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise model_error("estimator.error.bad_json", file=path.name, kind=type(exc).__name__) from None
    if not isinstance(data, dict):
        raise model_error("estimator.error.not_object", file=path.name)
    cfg = config_from_dict(data, where=path.name)
    return analyze(cfg, ref=ref, label=Phrase("error.estimator.label.uploaded", name=str(data.get("_name_or_path") or path.name)), source=str(path))


def _from_hub(repo: str) -> Arch:
    try:
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError as exc:
        raise ModelLoadError(key="error.estimator.needs_hub", repo=repr(repo), detail=str(exc)) from exc
    try:  # a config fetched before is in huggingface_hub's cache: no network needed
        return _hub_arch(repo, hf_hub_download(repo, "config.json", local_files_only=True, **token_kwargs()))
    except (LocalEntryNotFoundError, OSError):
        pass
    if constants.HF_HUB_OFFLINE or not _hub_reachable(constants.ENDPOINT):
        raise ModelLoadError(key="estimator.error.offline", repo=repr(repo))  # fail fast instead of huggingface_hub's retries with backoff
    try:
        path = hf_hub_download(repo, "config.json", etag_timeout=5, **token_kwargs())
    except GatedRepoError as exc:
        raise model_error("estimator.error.gated", repo=repr(repo)) from exc
    except RepositoryNotFoundError as exc:
        raise model_error("estimator.error.no_repo", repo=repr(repo)) from exc
    except LocalEntryNotFoundError as exc:  # raised when the Hub cannot be reached and nothing is cached
        raise ModelLoadError(key="estimator.error.offline", repo=repr(repo)) from exc
    except EntryNotFoundError as exc:
        raise model_error("estimator.error.no_config", repo=repr(repo)) from exc
    except Exception as exc:  # DNS, timeouts, proxies, HTTP 5xx: all mean "cannot reach the Hub"
        raise model_error("estimator.error.unreachable", repo=repr(repo), kind=type(exc).__name__) from exc
    return _hub_arch(repo, path)


def _hub_arch(repo: str, path: str) -> Arch:
    arch = _from_file(Path(path), repo)
    return replace(arch, ref=repo, label=repo, source=f"https://huggingface.co/{repo}/blob/main/config.json")


def _hub_reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """A quick TCP connect to the Hub endpoint (huggingface_hub itself retries for ~20 s when offline)."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def config_from_dict(data: dict[str, Any], *, where: str) -> Any:
    """A transformers config object from a config.json dict (no remote code is ever run)."""
    from transformers import AutoConfig

    model_type = data.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ModelLoadError(key="error.estimator.no_model_type", where=where)
    kwargs = {k: v for k, v in data.items() if k != "model_type"}
    sizes = {name: kwargs.get(key) for name, key in (("layers", "num_hidden_layers"), ("hidden", "hidden_size"), ("heads", "num_attention_heads"),
                                                     ("intermediate", "intermediate_size"), ("vocab", "vocab_size"))}
    check_arch_bounds({k: v for k, v in sizes.items() if isinstance(v, int) and not isinstance(v, bool)}, where=where)
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except ValueError as exc:
        if "recognize" in str(exc).lower():  # "Unrecognized model ...": an unknown model_type
            raise ModelLoadError(key="error.estimator.unknown_model_type", model_type=repr(model_type), where=where) from exc
        raise ModelLoadError(key="error.estimator.invalid_config", where=where, model_type=model_type, detail=str(exc)) from exc
    except Exception as exc:  # transformers 5 validates configs (strict dataclasses) with its own error types
        raise ModelLoadError(key="error.estimator.invalid_config", where=where, model_type=model_type, detail=_first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


# --------------------------------------------------------------------------------------------------
# Manual architectures
# --------------------------------------------------------------------------------------------------

_MANUAL_KEYS = {"L": "layers", "h": "hidden", "a": "heads", "kv": "kv_heads", "i": "intermediate", "v": "vocab", "tied": "tied"}
# The largest architecture the estimator builds (on the meta device, one module per layer): well above every published
# model (Llama 3.1 405B: 126 layers, hidden 16384, intermediate 53248, vocabulary 128256), and small enough that a
# made-up one cannot keep the server busy for minutes.
ARCH_BOUNDS = {"layers": 1024, "hidden": 65_536, "heads": 1024, "kv_heads": 1024, "intermediate": 262_144, "vocab": 1_048_576}


def check_arch_bounds(values: dict[str, int], *, where: str = "") -> None:
    """ConfigError naming the field when a size of an architecture is out of bounds (ARCH_BOUNDS)."""
    for name, value in values.items():
        bound = ARCH_BOUNDS.get(name)
        if bound is not None and value > bound:
            raise KeyedConfigError(name, value, Msg("estimator.allowed.at_most_where" if where else "estimator.allowed.at_most", bound=bound, where=where))


def arch_from_manual(layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int, vocab: int, tied: bool) -> Arch:
    """A Llama-style architecture (RMSNorm, SwiGLU, RoPE, GQA) from its numbers; usable as `MemoryQuery(model=arch.ref)`."""
    values = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "intermediate": intermediate, "vocab": vocab}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")) \
                or int(value) != value or value < 1:
            raise KeyedConfigError(name, value, Msg("estimator.allowed.whole_number"))
    check_arch_bounds({k: int(v) for k, v in values.items()})
    if hidden % heads:
        raise KeyedConfigError("heads", heads, Msg("estimator.allowed.divisor_of_hidden", hidden=int(hidden)))
    if heads % kv_heads:
        raise KeyedConfigError("kv_heads", kv_heads, Msg("estimator.allowed.divisor_of_heads", heads=int(heads)))
    ref = f"manual:L={int(layers)},h={int(hidden)},a={int(heads)},kv={int(kv_heads)},i={int(intermediate)},v={int(vocab)},tied={int(bool(tied))}"
    return resolve(ref)


def _manual_config(ref: str) -> Any:
    from transformers import LlamaConfig

    parts: dict[str, int] = {}
    for item in ref[len("manual:"):].split(","):
        if "=" not in item:
            raise KeyedConfigError("model", ref, Msg("estimator.allowed.manual_form"))
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in _MANUAL_KEYS:
            raise KeyedConfigError("model", ref, Msg("estimator.allowed.manual_keys"))
        try:
            parts[key] = int(value)
        except ValueError:
            raise KeyedConfigError(f"model ({_MANUAL_KEYS[key]})", value, Msg("estimator.allowed.whole")) from None
    missing = [k for k in ("L", "h", "a", "i", "v") if k not in parts]
    if missing:
        raise KeyedConfigError("model", ref, Msg("estimator.allowed.manual_all"))
    kv = parts.get("kv", parts["a"])
    for key, value in parts.items():
        if key != "tied" and value < 1:
            raise KeyedConfigError(_MANUAL_KEYS[key], value, Msg("estimator.allowed.whole_number"))
    check_arch_bounds({_MANUAL_KEYS[k]: v for k, v in {**parts, "kv": kv}.items() if k != "tied"})
    if parts["h"] % parts["a"]:
        raise KeyedConfigError("heads", parts["a"], Msg("estimator.allowed.divisor_of_hidden", hidden=parts["h"]))
    if parts["a"] % kv:
        raise KeyedConfigError("kv_heads", kv, Msg("estimator.allowed.divisor_of_heads", heads=parts["a"]))
    return LlamaConfig(
        num_hidden_layers=parts["L"], hidden_size=parts["h"], num_attention_heads=parts["a"], num_key_value_heads=kv,
        intermediate_size=parts["i"], vocab_size=parts["v"], tie_word_embeddings=bool(parts.get("tied", 0)),
    )
