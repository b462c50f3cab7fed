"""Export a causal LM to ONNX and run it with ONNX Runtime on the CPU (optional: requirements-onnx.txt).

What is exported: the plain forward graph ``input_ids (B, T), attention_mask (B, T) -> logits (B, T, V)``,
without a KV cache, with batch and sequence dynamic (sequence up to the model's positions). That is what a
server without PyTorch needs to score text or to generate greedily by re-running the whole sequence
(`OnnxRunner.generate`); a cached decoder graph would be faster for long outputs but needs the cache as
extra inputs/outputs per layer, which transformers' own `generate` does for us on the PyTorch side.

How: torch 2.13's `torch.onnx.export` defaults to the dynamo exporter (torch.export + onnxscript); the old
TorchScript tracer still exists but is deprecated and bakes Python branches into the graph (it warns about
transformers' mask code). The dynamo path needs `onnx` and `onnxscript`; running needs `onnxruntime`. They
are imported lazily, so the app works without them and says what to install when they are missing.

Works for CompactLLM (built-in or fine-tuned) and merged models (engine/export/merge.py); an unmerged LoRA adapter
is merged into a copy first. Quantized models (bitsandbytes, int8-dynamic) are refused: export the
unquantized weights. The export folder holds ``model.onnx`` (+ ``model.onnx.data``, the weights), the
tokenizer and ``onnx_info.json``; it is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import logging
import shutil
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import EngineError

ONNX_FILE = "model.onnx"
INFO_FILE = "onnx_info.json"
INPUT_NAMES = ("input_ids", "attention_mask")
_INSTALL = "pip install -r requirements-onnx.txt"


def missing_packages() -> list[str]:
    """The optional ONNX packages that are not installed (empty: export and ONNX Runtime work). Checked without importing
    them, so that the page can show the ONNX tab as disabled with the install command before anyone clicks."""
    import importlib.util

    return [m for m in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(m) is None]


INSTALL_COMMAND = _INSTALL


def _require(module: str) -> Any:
    """Import an optional ONNX dependency, or raise an EngineError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EngineError(key="error.onnx.missing", module=module, command=_INSTALL) from exc


class _LogitsOnly(torch.nn.Module):
    """The graph to export: no cache, no loss, a plain tensor out (ONNX outputs cannot be ModelOutput objects)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # (B, T), (B, T) -> (B, T, V)
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _exportable(model: Any) -> torch.nn.Module:
    """A CPU fp32 plain model to trace: merges an adapter (on a copy), refuses quantized or offloaded models."""
    from ..models.cpu_quant import is_int8_dynamic

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for module in base.modules():
        if is_int8_dynamic(module) or type(module).__name__ in ("Linear4bit", "Linear8bitLt"):
            raise EngineError(key="error.onnx.quantized")
    device_map = getattr(base, "hf_device_map", None) or {}
    if any(v in ("cpu", "disk") for v in device_map.values()) and len(set(device_map.values())) > 1:
        raise EngineError(key="error.onnx.split")
    param = next(model.parameters())
    needs_copy = hasattr(model, "merge_and_unload") or param.device.type != "cpu" or param.dtype != torch.float32
    if needs_copy:
        # Never change the caller's model (it may be the playground's cached one). For a GPU model the copy
        # briefly doubles its memory; ONNX export is meant for small models (2 GB protobuf graphs).
        model = copy.deepcopy(model)
        if hasattr(model, "merge_and_unload"):
            model = model.merge_and_unload()
        model = model.to("cpu", torch.float32)
    return model.eval()


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's chatter for the duration of one export: it warns that torchvision ops are not
    registered, that dynamic axis names were merged, and about deprecations inside torch itself, none of which
    the user can act on. Failures still raise."""
    logger = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for category in (UserWarning, FutureWarning, DeprecationWarning):
                warnings.simplefilter("ignore", category)
            yield
    finally:
        logger.setLevel(level)


def _cpu() -> Any:
    from ..hardware.device import DeviceInfo

    return DeviceInfo(kind="cpu", name="CPU (ONNX export)", total_gib=0.0, bf16=False)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, int) and v >= 0 and v not in ids:
                ids.append(v)
    return ids


def export_onnx(
    model_dir_or_loaded: Any,
    out_dir: str | Path,
    *,
    runs_dir: Path | None = None,
    opset: int | None = None,
) -> Path:
    """Export a model to ``out_dir/model.onnx`` (+ weights file, tokenizer, onnx_info.json); returns the .onnx path.

    model_dir_or_loaded: a `LoadedModel`, a model folder (e.g. a run's merged/ or model/), or any reference
    `load_model` accepts (builtin:NAME, run:NAME) resolved in runs_dir. opset: ONNX opset (default: the
    exporter's). Raises EngineError when the ONNX packages are missing or the model cannot be exported.
    """
    _require("onnx")
    _require("onnxscript")  # the dynamo exporter translates through onnxscript
    from ..models.loading import LoadedModel, load_model
    from ..runs import atomic_replace_dir

    if isinstance(model_dir_or_loaded, LoadedModel):
        loaded = model_dir_or_loaded
    else:
        from ..config import QuantSettings

        loaded = load_model(
            str(model_dir_or_loaded), QuantSettings(mode="none"), runs_dir=runs_dir, device=_cpu(),
            dtype=torch.float32, allow_local_paths=True,  # the caller (CLI, export step) names the folder
        )
    model = _exportable(loaded.model)
    config = model.config
    max_pos = int(loaded.context_length or 2048)
    seq = min(8, max_pos)
    # Example inputs of batch 2 and length > 1: torch.export specializes dimensions of size 0 or 1.
    example = torch.randint(0, int(config.vocab_size), (2, seq))
    batch_dim = torch.export.Dim("batch", min=1, max=4096)
    seq_dim = torch.export.Dim("sequence", min=1, max=max_pos)
    dims = {0: batch_dim, 1: seq_dim}

    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        t0 = time.perf_counter()
        try:
            with _quiet_exporter():
                torch.onnx.export(
                    _LogitsOnly(model).eval(),
                    (example, torch.ones_like(example)),
                    str(tmp / ONNX_FILE),
                    dynamo=True,
                    input_names=list(INPUT_NAMES),
                    output_names=["logits"],
                    dynamic_shapes={"input_ids": dims, "attention_mask": dims},
                    opset_version=opset,
                    external_data=True,  # weights in model.onnx.data: no 2 GB protobuf limit
                    verbose=False,
                )
        except Exception as exc:  # torch.export / onnxscript raise many types; all mean "this graph did not export"
            raise EngineError(key="error.onnx.failed", model=loaded.ref, kind=type(exc).__name__, detail=str(exc)[:800]) from exc
        seconds = time.perf_counter() - t0
        onnx = _require("onnx")
        onnx.checker.check_model(str(tmp / ONNX_FILE))  # by path: works with external weights
        loaded.tokenizer.save_pretrained(str(tmp))
        info = {
            "source": loaded.ref,
            "inputs": list(INPUT_NAMES),
            "outputs": ["logits"],
            "vocab_size": int(config.vocab_size),
            "max_position_embeddings": max_pos,
            "eos_token_ids": _eos_ids(model, loaded.tokenizer),
            "opset": opset,
            "torch": torch.__version__,
            "exporter": "torch.onnx dynamo",
            "export_seconds": round(seconds, 2),
        }
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        atomic_replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir / ONNX_FILE


class OnnxRunner:
    """An exported model in ONNX Runtime on the CPU: logits, and greedy generation without a KV cache."""

    def __init__(self, path: str | Path, *, threads: int | None = None, tokenizer: Any = None) -> None:
        """path: the .onnx file or its export folder. threads: ORT intra-op threads (default: ORT's choice,
        one per physical core). tokenizer: default the one saved beside the model, if any."""
        ort = _require("onnxruntime")
        path = Path(path)
        self.path = path / ONNX_FILE if path.is_dir() else path
        if not self.path.exists():
            raise EngineError(key="error.onnx.no_model", path=str(self.path))
        folder = self.path.parent
        info_path = folder / INFO_FILE
        self.info: dict[str, Any] = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: ORT warns about unused initializers on every load
        if threads:
            options.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.max_positions: int | None = self.info.get("max_position_embeddings")
        self.eos_token_ids: list[int] = list(self.info.get("eos_token_ids") or [])
        if tokenizer is None and (folder / "tokenizer_config.json").exists():
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.tokenizer = tokenizer

    def logits(self, input_ids: Any, attention_mask: Any = None) -> Any:
        """(B, T) int ids [, (B, T) mask] -> (B, T, V) float32 numpy logits."""
        import numpy as np

        ids = np.asarray(input_ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None, :]
        feeds = {"input_ids": ids}
        if "attention_mask" in self.input_names:
            feeds["attention_mask"] = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, dtype=np.int64)
        return self.session.run(["logits"], feeds)[0]

    def generate(
        self, input_ids: Sequence[int] | Any, max_new_tokens: int = 32, *, eos_token_ids: Iterable[int] | None = None
    ) -> list[int]:
        """Greedy continuation of one sequence; returns the new token ids (eos included when it ends the output).

        Each step re-runs the whole sequence (the graph has no cache). eos_token_ids: None = the model's, an
        empty list = never stop early. Stops at the model's context length.
        """
        import numpy as np

        ids = [int(t) for t in np.asarray(input_ids).reshape(-1)]
        stop = set(self.eos_token_ids if eos_token_ids is None else eos_token_ids)
        budget = max_new_tokens if self.max_positions is None else min(max_new_tokens, self.max_positions - len(ids))
        new: list[int] = []
        for _ in range(max(0, budget)):
            logits = self.logits(np.asarray([ids + new], dtype=np.int64))
            token = int(logits[0, -1].argmax())
            new.append(token)
            if token in stop:
                break
        return new

    def generate_text(self, prompt: str, max_new_tokens: int = 32) -> str:
        """Greedy raw continuation of `prompt` (no chat template), decoded without special tokens."""
        if self.tokenizer is None:
            raise EngineError(key="error.onnx.no_tokenizer", path=str(self.path))
        ids = self.tokenizer(prompt)["input_ids"]
        return self.tokenizer.decode(self.generate(ids, max_new_tokens), skip_special_tokens=True)


def _torch_greedy(model: Any, ids: torch.Tensor, max_new: int, eos: list[int], pad: int | None, use_cache: bool) -> list[int]:
    config = copy.deepcopy(model.generation_config)
    # "Never stop early": generate replaces eos None by the model's own eos, and min_new_tokens would mask eos
    # (changing the greedy choice). An id past the vocabulary can never be produced, so it never stops on it.
    config.eos_token_id = eos or [int(model.config.vocab_size)]
    config.pad_token_id = pad if pad is not None else (eos[0] if eos else 0)
    config.do_sample, config.max_new_tokens, config.use_cache = False, max_new, use_cache
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        if hasattr(config, name):
            setattr(config, name, None)  # greedy: no sampling knobs (generate warns about them otherwise)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    return [int(t) for t in out[0, ids.shape[1] :]]


def compare_onnx(
    loaded: Any,
    onnx_path: str | Path,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 16,
    stop_at_eos: bool = True,
    no_cache_baseline: bool = False,
    threads: int | None = None,
) -> dict[str, Any]:
    """Check an exported model against the PyTorch one on raw-text prompts, and time both.

    Returns max_abs_logits_diff (prompt logits, all positions), greedy_equal (every prompt's greedy tokens
    identical), mismatches (per-prompt token lists where not), tokens and tokens/s of PyTorch `generate` (KV
    cache) and of ONNX Runtime (full re-run per token), and with no_cache_baseline also PyTorch generate with
    use_cache=False (the like-for-like baseline for ORT). threads: ORT threads (default: torch's count).
    """
    import numpy as np

    if not prompts:
        raise EngineError(key="error.onnx.no_prompt")
    runner = OnnxRunner(onnx_path, threads=threads or torch.get_num_threads())
    model, tokenizer = loaded.model, loaded.tokenizer
    device = next(model.parameters()).device
    eos = _eos_ids(model, tokenizer) if stop_at_eos else []
    pad = tokenizer.pad_token_id
    result: dict[str, Any] = {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "mismatches": []}
    encoded = [tokenizer(p, return_tensors="pt")["input_ids"] for p in prompts]
    if any(ids.shape[1] == 0 for ids in encoded):
        raise EngineError(key="error.onnx.empty_prompt")

    diff = 0.0
    for ids in encoded:
        with torch.no_grad():
            ref = model(input_ids=ids.to(device), attention_mask=torch.ones_like(ids).to(device), use_cache=False).logits
        diff = max(diff, float(np.abs(runner.logits(ids.numpy()) - ref.float().cpu().numpy()).max()))
    result["max_abs_logits_diff"] = diff

    def timed(fn: Any) -> tuple[list[list[int]], float]:
        fn(encoded[0])  # warm-up: first-call allocations and kernel selection are not decoding speed
        t0 = time.perf_counter()
        outs = [fn(ids) for ids in encoded]
        return outs, time.perf_counter() - t0

    torch_out, torch_s = timed(lambda ids: _torch_greedy(model, ids.to(device), max_new_tokens, eos, pad, True))
    onnx_out, onnx_s = timed(lambda ids: runner.generate(ids.numpy(), max_new_tokens, eos_token_ids=eos))
    for prompt, a, b in zip(prompts, torch_out, onnx_out, strict=True):
        if a != b:
            result["mismatches"].append({"prompt": prompt, "torch": a, "onnx": b})
    result["greedy_equal"] = not result["mismatches"]
    result["torch_tokens"] = sum(map(len, torch_out))
    result["onnx_tokens"] = sum(map(len, onnx_out))
    result["torch_tokens_per_s"] = result["torch_tokens"] / torch_s if torch_s > 0 else 0.0
    result["onnx_tokens_per_s"] = result["onnx_tokens"] / onnx_s if onnx_s > 0 else 0.0
    if no_cache_baseline:
        nc_out, nc_s = timed(lambda ids: _torch_greedy(model, ids.to(device), max_new_tokens, eos, pad, False))
        result["torch_no_cache_tokens_per_s"] = sum(map(len, nc_out)) / nc_s if nc_s > 0 else 0.0
    return result
