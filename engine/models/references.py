"""Model references: which weights a `ref` names, checked against the path policy, without loading anything.

Model references (`ref`):

- ``builtin:NAME``   a built-in compact model: a copy rebuilt into ``<runs>/_builtin/NAME/model`` if there is one,
                     else the one shipped in ``presets/models/NAME`` (compact-mini), else pretrained on first use
- ``run:NAME``       a finished run ``<runs>/NAME``: its ``adapter/`` (peft LoRA, applied on the run's base
                     model, not merged) or its ``model/`` (full fine-tune / scratch)
- ``run:NAME/merged`` the 16-bit model saved by merging that run's adapter (``<runs>/NAME/merged``)
- a local folder     only with ``allow_local_paths=True`` (the CLI) or when it lies inside the runs folder:
                     on a public link, user input must never name an arbitrary server path
- a Hub id           ``owner/name`` (or a legacy single name such as ``gpt2``), via ``from_pretrained``

`resolve_model` turns a reference into a `ModelSource` (local folder or Hub id, plus the run's adapter and the
quantization it trained with); `resolve_adapter` does the same for an adapter reference and
`resolve_offload_folder` for the folder device_map="auto" offloads to. No torch work here: cheap, and testable
on its own. engine/models/loading.py loads what these name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..config import QuantSettings
from ..errors import EngineError, ModelLoadError
from ..objectives import OBJECTIVE_METHODS
from ..refs import (
    BUILTIN_PREFIX,
    HUB_MODEL_ID_RE,
    MERGED_SUFFIX,
    RUN_PREFIX,
    default_runs_dir,
    is_valid_run_name,
    is_within,
    path_exists,
    run_ref_dir,
)

_MAX_REF_DEPTH = 4  # run:A whose base is run:B whose base is ... (guards against a cycle)


@dataclass(frozen=True)
class ModelSource:
    """Where the weights of a reference are: a local folder or a Hub id, and optionally an adapter."""

    location: str  # local folder (absolute) or Hub id
    is_local: bool
    description: str
    adapter_dir: Path | None = None  # peft adapter to apply on top (run:NAME with adapter/)
    base: ModelSource | None = None  # for adapter runs: the base model's source
    run_quant: QuantSettings | None = None  # quantization the run trained with (qlora -> 4bit)




# Built-in models shipped with the repository (compact-mini), made by `python -m engine prepare-builtin NAME --ship`
# (engine/training/builtin.py). Read-only at runtime: a rebuild goes to the runs folder and wins over this copy.
SHIPPED_MODELS_DIR = Path(__file__).resolve().parents[2] / "presets" / "models"


def builtin_model_dir(name: str, runs_dir: Path | None = None) -> Path:
    """Folder a built-in compact model NAME is pretrained (or rebuilt) into: ``<runs>/_builtin/NAME/model``."""
    if not is_valid_run_name(name):
        raise ModelLoadError(key="error.model.builtin_name", name=name)
    return Path(runs_dir or default_runs_dir()) / "_builtin" / name / "model"


def shipped_model_dir(name: str) -> Path:
    """Folder of the copy of built-in model NAME shipped in the repository: ``presets/models/NAME`` (may not exist)."""
    if not is_valid_run_name(name):
        raise ModelLoadError(key="error.model.builtin_name", name=name)
    return SHIPPED_MODELS_DIR / name


def shipped_examples() -> dict[str, dict]:
    """The fine-tuned examples shipped in presets/models (engine/export/example.py): folder name -> its recorded.json,
    for every folder whose record names the base model it was trained from (the built-in base models' records do not)."""
    out = {}
    for folder in sorted(SHIPPED_MODELS_DIR.iterdir()) if SHIPPED_MODELS_DIR.is_dir() else []:
        try:
            record = json.loads((folder / "recorded.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("base_model") and (folder / "config.json").exists() and is_valid_run_name(folder.name):
            out[folder.name] = record
    return out


def builtin_weights_dir(name: str, runs_dir: Path | None = None) -> Path | None:
    """The folder ``builtin:NAME`` loads: a copy built in the runs folder wins (a `--rebuild`, or a preset pretrained
    on first use), else the shipped copy; None when there is neither (the preset is pretrained on first use)."""
    for folder in (builtin_model_dir(name, runs_dir), shipped_model_dir(name)):
        if (folder / "config.json").exists():
            return folder
    return None


def read_run_base(run_dir: Path) -> tuple[str | None, QuantSettings | None]:
    """Base model reference and quantization of a run, from its config.yaml (None when unreadable)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return None, None
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    base = data.get("base_model")
    quant = None
    # a QLoRA run: method qlora, or dpo/orpo/grpo with tuning qlora (engine/config.py TrainConfig.weights)
    if data.get("method") == "qlora" or (data.get("method") in OBJECTIVE_METHODS and data.get("tuning") == "qlora"):
        q = data.get("quant") or {}
        try:
            # The weight format follows the run; the compute dtype follows the device it is loaded on now
            # (a run trained in bf16 on an A100 must still load on a T4).
            quant = QuantSettings(
                mode="4bit", quant_type=q.get("quant_type", "nf4"), double_quant=bool(q.get("double_quant", True))
            )
        except EngineError:
            quant = QuantSettings(mode="4bit")
    return (str(base) if base else None), quant


def resolve_model(ref: str, runs_dir: Path, allow_local_paths: bool, depth: int = 0) -> ModelSource:
    """Where the weights of `ref` are (see the module docstring); ModelLoadError with a message for the user."""
    if depth > _MAX_REF_DEPTH:
        raise ModelLoadError(key="error.model.ref_cycle", ref=ref)
    ref = (ref or "").strip()
    if not ref:
        raise ModelLoadError(key="playground.error.no_model")

    if ref.startswith(BUILTIN_PREFIX):
        name = ref[len(BUILTIN_PREFIX) :]
        folder = builtin_weights_dir(name, runs_dir)
        if folder is None:
            _check_known_preset(name)
            raise ModelLoadError(key="firstrun.msg.not_pretrained", name=name)
        return ModelSource(str(folder), True, f"built-in {name}")

    if ref.startswith(RUN_PREFIX):
        name = ref[len(RUN_PREFIX) :]
        if name.endswith(MERGED_SUFFIX):  # run:NAME/merged: the 16-bit model made by merging the run's adapter
            name = name[: -len(MERGED_SUFFIX)]
            merged = run_ref_dir(name, runs_dir) / "merged"
            if not (merged / "config.json").exists():
                raise ModelLoadError(key="playground.error.not_merged", run=repr(name))
            return ModelSource(str(merged), True, f"run {name} (merged)")
        run_dir = run_ref_dir(name, runs_dir)
        if not run_dir.is_dir():
            raise ModelLoadError(key="playground.error.unknown_run", run=repr(name))
        adapter_dir = run_dir / "adapter"
        model_dir = run_dir / "model"
        if (adapter_dir / "adapter_config.json").exists():
            base_ref, run_quant = read_run_base(run_dir)
            if not base_ref:
                base_ref = adapter_base(adapter_dir)
            if not base_ref:
                raise ModelLoadError(key="error.model.adapter_no_base", run=name)
            # The run's config.yaml was validated against the path policy when the run was created, and
            # an adapter_config written by our trainer names a folder it loaded: trust both here.
            base = resolve_model(base_ref, runs_dir, True, depth + 1)
            if base.adapter_dir is not None and base.base is not None:
                # A LoRA run trained on another LoRA run continued that run's adapter (engine/training/run.py
                # `_continue_adapter`), so its adapter already holds the first one: both share the first base.
                base = base.base
            return ModelSource(
                base.location,
                base.is_local,
                f"run {name} (LoRA adapter on {base.description})",
                adapter_dir=adapter_dir,
                base=base,
                run_quant=run_quant,
            )
        if (model_dir / "config.json").exists():
            return ModelSource(str(model_dir), True, f"run {name}")
        raise ModelLoadError(key="playground.error.run_unfinished", run=repr(name))

    path = Path(ref).expanduser()
    # Anything that exists on disk is a path (from_pretrained would prefer the folder over a Hub id of the
    # same spelling), and so is anything that looks like one.
    if path_exists(path) or path.is_absolute() or ref.startswith((".", "~", os.sep)):
        if not (allow_local_paths or is_within(path, runs_dir)):
            raise ModelLoadError(key="error.model.server_path", ref=ref)
        if not path.is_dir():
            raise ModelLoadError(key="error.model.no_folder", ref=ref)
        if not (path / "config.json").exists():
            raise ModelLoadError(key="error.model.not_model_folder", ref=ref)
        return ModelSource(str(path.resolve()), True, f"folder {path.resolve()}")

    if not HUB_MODEL_ID_RE.match(ref) or ".." in ref:
        raise ModelLoadError(key="error.model.not_a_ref", ref=ref)
    return ModelSource(ref, False, f"Hugging Face {ref}")


def _check_known_preset(name: str) -> None:
    from .compact import compact_presets

    presets = compact_presets()
    if name not in presets:
        raise ModelLoadError(key="firstrun.msg.unknown_builtin", name=name, known=", ".join(presets))


def adapter_base(adapter_dir: Path) -> str | None:
    """The base model an adapter folder names in its adapter_config.json (None when unreadable)."""
    try:
        data = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    base = data.get("base_model_name_or_path")
    return str(base) if base else None


def resolve_adapter(adapter: str, runs_dir: Path, allow_local_paths: bool) -> str:
    """An adapter reference: run:NAME (its adapter/), a local adapter folder (policy as for models) or a Hub id."""
    if adapter.startswith(RUN_PREFIX):
        run_dir = run_ref_dir(adapter[len(RUN_PREFIX) :], runs_dir)
        folder = run_dir / "adapter"
        if not (folder / "adapter_config.json").exists():
            raise ModelLoadError(key="error.model.run_no_adapter", run=adapter[len(RUN_PREFIX) :])
        return str(folder)
    path = Path(adapter).expanduser()
    if path_exists(path) or path.is_absolute() or adapter.startswith((".", "~", os.sep)):
        if not (allow_local_paths or is_within(path, runs_dir)):
            raise ModelLoadError(key="error.model.adapter_server_path", ref=adapter)
        if not (path / "adapter_config.json").exists():
            raise ModelLoadError(key="error.model.not_adapter_folder", ref=adapter)
        return str(path.resolve())
    if not HUB_MODEL_ID_RE.match(adapter) or ".." in adapter:
        raise ModelLoadError(key="error.model.not_adapter_ref", ref=adapter)


def resolve_offload_folder(folder: Path | None, runs_dir: Path, allow_local_paths: bool) -> Path:
    """Where device_map="auto" writes weights that fit neither GPU nor RAM: under the runs dir by default (it is
    the one folder the app may write big files to, and on Colab it can live on Drive)."""
    path = Path(folder).expanduser() if folder is not None else runs_dir / "_offload"
    if not (allow_local_paths or is_within(path, runs_dir)):
        raise ModelLoadError(key="error.model.offload_outside", folder=str(path), runs=str(runs_dir))
    return path


def architecture_ref(ref: str, runs_dir: Path, depth: int = 0) -> str:
    """The reference whose architecture `ref` has, for the memory estimator: a run (run:NAME, run:NAME/merged) has
    its base model's architecture (LoRA, full fine-tuning and merging keep it; a scratch run's base is its
    builtin: preset), read from the run's config.yaml and followed through runs of runs; a local base folder
    becomes its config.json. Other references are returned as they are."""
    ref = (ref or "").strip()
    if not ref.startswith(RUN_PREFIX) or depth > _MAX_REF_DEPTH:
        return ref
    name = ref[len(RUN_PREFIX) :]
    if name.endswith(MERGED_SUFFIX):
        name = name[: -len(MERGED_SUFFIX)]
    base, _quant = read_run_base(run_ref_dir(name, runs_dir))
    if not base:
        raise ModelLoadError(key="error.model.run_no_base", run=name)
    if base.startswith(RUN_PREFIX):
        return architecture_ref(base, runs_dir, depth + 1)
    folder = Path(base).expanduser()
    if folder.is_absolute() and (folder / "config.json").is_file():
        return str(folder / "config.json")
    return base


def model_type_of(ref: str, runs_dir: Path, *, allow_local_paths: bool = True) -> str | None:
    """The `model_type` of config.json for the weights `ref` names (a run: its base's), or None when it cannot be
    read (an unknown reference, the Hub unreachable and the config not cached): the dtype policy
    (engine/hardware/device.py) then applies no family rule, and the load itself reports the real problem."""
    try:
        source = resolve_model(ref, runs_dir, allow_local_paths)
    except EngineError:
        return None
    if source.is_local:
        path = Path(source.location) / "config.json"
    else:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

        from ..sharing import token_kwargs

        try:  # for a visitor of a shared app, in the app and in its training processes: never the server's token
            path = Path(hf_hub_download(source.location, "config.json", **token_kwargs()))
        except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError):
            return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    return str(model_type) if model_type else None
