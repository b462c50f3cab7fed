"""Export a finished run: merge its LoRA adapter into the base model, and zip the run (or an export folder) for download.

Merging a QLoRA adapter the right way (design.md §4, "cannot merge a QLoRA adapter"): the adapter was
trained on 4-bit weights, but merging into 4-bit weights would re-quantize the sum and lose most of the
update. So the base is reloaded *unquantized* (fp32 on CPU, the chosen 16-bit dtype on a GPU), the adapter is
applied with peft, `merge_and_unload()` folds it into the weights, and the result is saved as safetensors
with the tokenizer: a plain model any tool can load, no peft needed. On CPU the merge is done in fp32 and
only the saved copy is cast to the requested dtype, so an fp16 export loses nothing to fp16 arithmetic.

Outputs are written under a temporary name and renamed into place (design.md §3: atomic writes).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from ..config import QuantSettings
from ..errors import EngineError, ModelLoadError, Phrase
from ..hardware.device import DeviceInfo, detect_device, dtype_name, resolve_dtype

ExportDtype = Literal["auto", "fp16", "bf16", "fp32"]
_EXPORT_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# Already-compressed formats: deflating them costs time and saves nothing.
_STORED_SUFFIXES = {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".zip", ".gz", ".npy", ".data"}


def _export_dtype(dtype: str, device: DeviceInfo) -> torch.dtype:
    if dtype == "auto":
        return resolve_dtype("auto", device)
    if dtype not in _EXPORT_DTYPES:
        raise EngineError(key="error.export.merge_dtype", dtype=str(dtype))
    return _EXPORT_DTYPES[dtype]


@dataclass(frozen=True)
class MergePlan:
    """Where a merge runs and why: "cpu" or "auto" (the device policy: the GPU when there is one)."""

    device: Literal["auto", "cpu"]
    reason: str  # a Phrase: English as text, any language with for_people
    need_gib: float | None  # the unquantized base's weights in the merge dtype (estimator), None when unknown


MERGE_MARGIN_GIB = 1.0  # beside the weights: the adapter, one layer's merge temporaries, CUDA context and allocator slack


def merge_plan(run_dir: Path, runs_dir: Path, device: DeviceInfo, free_gib: float | None) -> MergePlan:
    """Merge on the GPU only when the estimator says the unquantized base fits in its free memory (`free_gib`, as the
    driver reports it; None: use the card's total); otherwise, or without a GPU, on the CPU."""
    from ..config import MemoryQuery
    from ..estimator.memory import estimate
    from ..models.references import architecture_ref

    if device.kind != "cuda":
        return MergePlan("cpu", Phrase("text.merge.no_gpu"), None)
    try:
        ref = architecture_ref(f"run:{Path(run_dir).name}", runs_dir)
        dtype = dtype_name(_export_dtype("auto", device))  # a GPU merge loads the base in the dtype it saves
        weights = estimate(MemoryQuery(model=ref, task="inference", weight_precision=dtype, batch=1, seq_len=16,
                                       new_tokens=0)).breakdown_gib.get("weights", 0.0)
    except EngineError as exc:
        return MergePlan("cpu", Phrase("text.merge.unknown_base", detail=str(exc)), None)
    need = weights + MERGE_MARGIN_GIB
    room = device.total_gib if free_gib is None else free_gib
    if need > 0.9 * room:
        return MergePlan("cpu", Phrase("text.merge.cpu", need=round(need, 1), room=round(room, 1)), need)
    return MergePlan("auto", Phrase("text.merge.gpu", need=round(need, 1), room=round(room, 1)), need)


def merge_adapter(
    run_dir: Path,
    out_dir: Path | None = None,
    dtype: ExportDtype = "auto",
    *,
    runs_dir: Path | None = None,
    device: DeviceInfo | None = None,
) -> Path:
    """Merge the LoRA adapter of a finished run into its base model; returns the merged folder.

    out_dir: default `<run>/merged`. dtype: of the saved weights; auto = the device policy (fp32 on CPU,
    bf16 on Ampere+, fp16 on T4). runs_dir: where `builtin:`/`run:` references of the base resolve
    (default: the run's parent folder). Raises ModelLoadError when the run has no adapter or the base
    cannot be loaded.
    """
    from peft import PeftModel

    from ..models.loading import has_tokenizer, load_model, tokenizer_from
    from ..models.references import adapter_base, read_run_base
    from ..runs import atomic_replace_dir, atomic_write_text

    run_dir = Path(run_dir)
    adapter_dir = run_dir / "adapter"
    if not (adapter_dir / "adapter_config.json").exists():
        if (run_dir / "model" / "config.json").exists():
            raise ModelLoadError(key="error.export.full_no_merge", run=run_dir.name)
        raise ModelLoadError(key="error.export.no_adapter", run=run_dir.name)
    base_ref, _ = read_run_base(run_dir)
    base_ref = base_ref or adapter_base(adapter_dir)
    if not base_ref:
        raise ModelLoadError(key="error.export.no_base", run=run_dir.name)

    device = device or detect_device()
    save_dtype = _export_dtype(dtype, device)
    # CPU: merge in fp32 (fp16 arithmetic on CPU is slow and lossy), cast only for saving.
    # GPU: load straight in the saved dtype, since there memory is what is scarce.
    load_dtype = torch.float32 if device.kind == "cpu" else save_dtype
    loaded = load_model(
        base_ref,
        QuantSettings(mode="none"),  # never merge into quantized weights
        runs_dir=Path(runs_dir) if runs_dir else run_dir.parent,
        allow_local_paths=True,  # the base was named by this run's own config, validated when it was created
        device=device,
        dtype=load_dtype,
    )
    base = loaded.model
    if isinstance(base, PeftModel):  # the base is itself an adapter run (run:NAME): fold that in first
        base = base.merge_and_unload()
    try:
        model = PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=False)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelLoadError(key="error.export.adapter_mismatch", run=run_dir.name, base=base_ref, detail=str(exc)[:500]) from exc
    merged = model.merge_and_unload()
    merged = merged.to(save_dtype)
    merged.eval()

    tokenizer = tokenizer_from(str(adapter_dir), False) if has_tokenizer(adapter_dir) else loaded.tokenizer

    out_dir = Path(out_dir) if out_dir else run_dir / "merged"
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        merged.save_pretrained(str(tmp))  # safetensors (the only format transformers 5 writes)
        tokenizer.save_pretrained(str(tmp))
        info = {"base_model": base_ref, "adapter": str(adapter_dir), "dtype": str(save_dtype).replace("torch.", "")}
        atomic_write_text(tmp / "merge_info.json", json.dumps(info, indent=2) + "\n")
        atomic_replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _skip(rel: Path, include_checkpoints: bool) -> bool:
    first = rel.parts[0]
    if not include_checkpoints and first.startswith("checkpoint-"):
        return True
    # Temp names of atomic writes (".merged.tmp", ".config.yaml.xyz.tmp"), the live pid file and a stop
    # request are process state, not results.
    return any(part.startswith(".") for part in rel.parts) or rel.as_posix() in ("pid", "STOP", "merge.pid")


def zip_run(run_dir: Path, *, include_checkpoints: bool = False, out_path: Path | None = None) -> Path:
    """Zip a run folder for download; returns the zip's path (default `<runs>/_exports/<run>.zip`).

    Files are stored under `<run>/...` in the archive. Checkpoints are left out unless asked for (they
    are only needed to resume, and are the largest part). Written to a temp name, then renamed.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise EngineError(key="error.export.no_zip", run=run_dir.name)
    out_path = Path(out_path) if out_path else run_dir.parent / "_exports" / f"{run_dir.name}.zip"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    files = (p for p in sorted(run_dir.rglob("*"))
             if p.is_file() and not p.is_symlink() and not _skip(p.relative_to(run_dir), include_checkpoints))
    return _write_zip(out_path, run_dir, files)


def zip_export(folder: Path, out_path: Path | None = None) -> Path:
    """One zip of an export folder (GGUF, ONNX), files under `<folder name>/`; weights stored, not deflated (they do not
    compress); beside the folder by default. Written to a temp name, then renamed."""
    folder = Path(folder)
    out_path = Path(out_path) if out_path else folder.parent / f"{folder.name}.zip"
    files = (p for p in sorted(folder.rglob("*")) if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    return _write_zip(out_path, folder, files)


def _write_zip(out_path: Path, root: Path, files: Iterable[Path]) -> Path:
    """Zip `files` (under `root`) as `<root name>/<relative path>` into `out_path`, atomically: written to a temp name,
    then renamed. Weights are stored, not deflated (they do not compress)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            for path in files:
                method = zipfile.ZIP_STORED if path.suffix in _STORED_SUFFIXES else zipfile.ZIP_DEFLATED
                zf.write(path, f"{root.name}/{path.relative_to(root).as_posix()}", compress_type=method)
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out_path
