"""Loading a model for the Playground: a checked reference, an optional adapter, a placement (one device or
accelerate's auto offload with a GPU budget), and a refusal when a running training run leaves no room for it; and
loading one for the ONNX export (unquantized, no adapter); unloading them all.

A model that comes from the Hugging Face Hub is checked first (engine/models/hub_access.py): offline or with the Hub
unreachable, a model that is not in the local cache is refused at once with a message, instead of after ~48 s of
retries; one that is cached loads from the cache without a single request."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import run_access
from ..config import MemoryQuery, QuantSettings
from ..errors import EngineError, GenerationError
from ..estimator import memory
from ..estimator.handoff import check_ui_model_ref
from ..sharing import MAX_MODEL_ENV, hub_token, is_shared, max_model_gib
from .choices import NO_ADAPTER, PLACEMENTS

if TYPE_CHECKING:
    from ..training.jobs import JobManager


def load_for_playground(jobs: JobManager, ref_v: str, quant_mode: str, extra: tuple = (), *, allow_local_models: bool = False) -> Any:
    """The cached model for (reference, quantization) plus the optional (adapter, placement, GPU budget)."""
    from ..hardware.coexist import check_room_to_generate, cuda_free_gib
    from ..models.cache import MODEL_CACHE
    from ..models.hub_access import offline_while

    if ref_v in (None, ""):
        raise GenerationError(key="playground.error.no_model")
    ref = check_ui_model_ref(ref_v, jobs.runs_dir, allow_local=allow_local_models)
    adapter_v, placement_v, budget = (tuple(extra) + (NO_ADAPTER, "one device", 0))[:3]
    adapter_ref = None if adapter_v in (None, "", NO_ADAPTER) else check_ui_model_ref(adapter_v, jobs.runs_dir)
    for used in (ref, adapter_ref):  # any visitor may try a run (engine/run_access.py): asked all the same, in one place
        run_access.check_run_access(jobs.runs_dir, used, None, "try", owner_only=getattr(jobs, "owner_only", None))
    cache_only = check_reachable(ref, adapter_ref, jobs.runs_dir, allow_local_models)
    check_hub_model_size(ref)
    device_map, max_memory = PLACEMENTS.get(placement_v, None), None
    if device_map == "auto" and budget and float(budget) > 0:
        from ..hardware.device import ram_gib

        # accelerate only uses the devices named here: give the CPU the machine's RAM less a margin for the app
        max_memory = {0: f"{float(budget):g}GiB", "cpu": f"{max(1.0, ram_gib() - 2):.0f}GiB"}
    active, free = jobs.active(), cuda_free_gib()
    if active and free is not None and not any(e["ref"] == ref for e in MODEL_CACHE.loaded()):
        check_room_to_generate(weights_gib(ref, quant_mode, jobs.runs_dir), training_run=active, free_gib=free)
    # The playground never trains (training loads its own copy in a subprocess), so the faster packed
    # bitsandbytes CPU layout is safe here (engine/models/bnb_safety.py explains the hazard it poses to training).
    with offline_while(cache_only):
        return MODEL_CACHE.get_or_load(ref, QuantSettings(mode=quant_mode), runs_dir=jobs.runs_dir, allow_cpu_repack=True, adapter=adapter_ref,
                                       device_map=device_map, max_memory=max_memory, allow_local_paths=allow_local_models)


def hub_models(ref: str, adapter_ref: str | None, runs_dir: Path, allow_local: bool) -> list[str]:
    """The Hugging Face ids a load of `ref` (plus `adapter_ref`) reads from the Hub: the model itself, a run's base, a
    Hub adapter. Raises the reference's own error (an unknown run, a built-in model not pretrained...) at once."""
    from ..models.references import resolve_model

    source = resolve_model(ref, runs_dir, allow_local)
    ids = [] if source.is_local else [source.location]
    if adapter_ref and not adapter_ref.startswith(("run:", "builtin:")):  # the page names adapters as runs or Hub ids only
        ids.append(adapter_ref)
    return ids


def check_reachable(ref: str, adapter_ref: str | None, runs_dir: Path, allow_local: bool) -> bool:
    """Whether the load must read the local Hugging Face cache only (the Hub unreachable, the files cached); a keyed
    ModelLoadError at once when a Hub model cannot be loaded now. A model already loaded in the cache is not checked."""
    from ..models.cache import MODEL_CACHE
    from ..models.hub_access import check_hub_model

    if any(e["ref"] == ref for e in MODEL_CACHE.loaded()) and not adapter_ref:
        return False
    return any([check_hub_model(repo) for repo in hub_models(ref, adapter_ref, runs_dir, allow_local)])


def weights_gib(ref: str, quant_mode: str, runs_dir: Path) -> float:
    """The estimator's GiB of the weights the playground would load for `ref` on this machine's GPU: a run (run:NAME,
    run:NAME/merged) counts as its base architecture (from its config.yaml), in the playground's quantization (the
    loader applies it to a run's base too) or, unquantized, in the dtype the policy picks for that model here (fp32 for a
    family that overflows in fp16 on a GPU without bf16). 0 when the estimator does not know the model (a Hub model
    offline): the load itself then decides."""
    from ..hardware.device import detect_device, dtype_name, resolve_dtype
    from ..models.references import architecture_ref

    try:
        arch_ref = architecture_ref(ref, runs_dir)
        wp = {"4bit": "nf4", "8bit": "int8"}.get(quant_mode)
        if wp is None:
            from ..estimator.model_config import resolve

            wp = dtype_name(resolve_dtype("auto", detect_device(), model_type=resolve(arch_ref).model_type or None))
        est = memory.estimate(MemoryQuery(model=arch_ref, task="inference", weight_precision=wp, batch=1, seq_len=16, new_tokens=0))
    except EngineError:
        return 0.0
    return est.breakdown_gib.get("weights", 0.0)


def load_for_export(jobs: JobManager, ref_v: str, *, allow_local_models: bool = False, owner: str | None = None) -> tuple[str, Any]:
    """The checked reference and its model loaded unquantized for the ONNX export; a LoRA adapter run is refused, and
    (shared app) a run of another browser or session (engine/run_access.py: the ONNX file hands its weights out)."""
    from ..models.cache import MODEL_CACHE
    from ..models.hub_access import offline_while

    if ref_v in (None, ""):
        raise GenerationError(key="playground.error.no_model")
    ref = check_ui_model_ref(ref_v, jobs.runs_dir, allow_local=allow_local_models)
    run_access.check_run_access(jobs.runs_dir, ref, owner, "onnx", owner_only=getattr(jobs, "owner_only", None))
    with offline_while(check_reachable(ref, None, jobs.runs_dir, allow_local_models)):
        loaded = MODEL_CACHE.get_or_load(ref, QuantSettings(mode="none"), runs_dir=jobs.runs_dir, allow_local_paths=allow_local_models)
    if getattr(loaded, "adapter", None):
        raise EngineError(key="playground.error.export_adapter")
    return ref, loaded


def unload_models() -> int:
    """Unload every model the playground has cached (frees their memory); how many there were. Refused on a shared app:
    the cache is shared by every visitor (it unloads the least recently used model by itself before loading another)."""
    from ..models.cache import MODEL_CACHE

    if is_shared():
        raise EngineError(key="playground.error.unload_shared")
    return MODEL_CACHE.unload_all()


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")


def check_hub_model_size(ref: str, api: Any = None) -> float | None:
    """On a shared app, the size of a Hub model's weight files from its file listing, before anything is downloaded;
    EngineError above the cap (engine/sharing.py `max_model_gib`). None when not checked: not shared, not a Hub id,
    or offline (nothing can be downloaded then)."""
    from huggingface_hub import constants

    if not is_shared() or ref.startswith(("builtin:", "run:")) or (api is None and constants.HF_HUB_OFFLINE):
        return None
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    try:
        info = api.model_info(ref, files_metadata=True, token=hub_token())
    except Exception as exc:  # noqa: BLE001 - every Hub failure becomes one message (never the token: none is sent)
        raise EngineError(key="playground.error.hub_listing", model=repr(ref), kind=type(exc).__name__) from None
    gib = sum((f.size or 0) for f in (info.siblings or []) if f.rfilename.endswith(WEIGHT_SUFFIXES)) / 2**30
    cap = max_model_gib()
    if gib > cap:
        raise EngineError(key="playground.error.hub_too_big", model=ref, gib=f"{gib:.1f}", cap=f"{cap:.1f}", env=MAX_MODEL_ENV)
    return gib
