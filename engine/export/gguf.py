"""Export a model to GGUF for llama.cpp, Ollama and LM Studio, with nothing to compile and nothing to download.

Written with the `gguf` package's pure-Python writer (the same library llama.cpp's own converter uses): f16, q8_0
and q4_0 are quantized in numpy by `gguf.quants`. Which models: the llama.cpp architectures of our catalog whose
tensors map one to one (Llama and Mistral -> `llama`, Qwen2/2.5 -> `qwen2`) and the built-in compact models, which
are GPT-2 in all but names (pre-LayerNorm, learned positions, GELU MLP, tied head) -> `gpt2`. Anything else is
refused by `gguf_support` with the reason, so the page can say so before the click.

Things that must match llama.cpp's converter (convert_hf_to_gguf.py) exactly, or the file loads and talks nonsense:
- Llama q/k projections are permuted (`_permute`): llama.cpp applies rotary embeddings to interleaved pairs,
  transformers to the two halves of each head (transformers' GGUF loader undoes this, which the tests check);
- Llama 3 long-context RoPE scaling is a `rope_freqs` tensor of per-dimension factors;
- the built-in model's q/k/v are concatenated into GPT-2's fused `attn_qkv`; a model trained without biases gets
  zero biases (llama.cpp's GPT-2 requires them, and zeros change nothing);
- norms and biases stay f32; a matrix whose rows are not a multiple of the 32-weight block stays f16; in q4_0 the
  token embedding and output head are q8_0 (they suffer most from 4-bit).
One known difference: CompactLLM's GELU is the exact (erf) one, llama.cpp's GPT-2 uses the tanh approximation
(differences around 1e-3 in activations; greedy outputs agree in the tests).

The export folder holds `<name>-<type>.gguf`, an Ollama `Modelfile` (engine/export/modelfile.py) and
`gguf_info.json`; `zip_export` packs it for download. Written under a temporary name and renamed into place.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import GgufSettings
from ..errors import EngineError, Phrase

# transformers model_type -> llama.cpp architecture
GGUF_ARCHS = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "compact_llm": "gpt2"}
INFO_FILE = "gguf_info.json"
_INSTALL = "pip install -r requirements.txt"


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:
        raise EngineError(key="error.gguf.needs_package", install=_INSTALL) from exc
    return gguf


def _read_config(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise EngineError(key="error.gguf.no_config", folder=folder.name) from exc
    return data if isinstance(data, dict) else {}


def gguf_support(config: dict[str, Any]) -> Phrase | None:
    """None when a model with this config.json can be written to GGUF; otherwise the reason, in words (a Phrase: English
    as a str, `render(lang)` in the page's language)."""
    mtype = config.get("model_type")
    if mtype not in GGUF_ARCHS:
        return Phrase("error.gguf.architecture", type=str(mtype)) if mtype else Phrase("error.gguf.architecture_unknown")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if rope_type not in ("default", "llama3", "linear"):
        return Phrase("error.gguf.rope", rope=repr(rope_type))
    if mtype == "compact_llm" and config.get("num_key_value_heads") not in (None, config.get("num_attention_heads")):
        return Phrase("error.gguf.compact_kv")
    return None


def _tensors(folder: Path) -> Iterator[tuple[str, np.ndarray]]:
    """(name, fp32 array) for every tensor of the model's safetensors files, one at a time (low memory)."""
    import torch
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise EngineError(key="error.gguf.no_weights", folder=folder.name)
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, f.get_tensor(name).to(torch.float32).numpy()


def _permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp's rotary layout for q/k (rows of each head interleaved pairwise), as its converter writes it."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama3_rope_freqs(rope: dict[str, Any], head_dim: int) -> np.ndarray:
    """The per-dimension divisors llama.cpp applies for Llama 3's long-context RoPE (the converter's formula)."""
    base = float(rope.get("rope_theta", 10000.0))
    factor, low, high = float(rope.get("factor", 8.0)), float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_ctx = float(rope.get("original_max_position_embeddings", 8192))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for freq in 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _compact_tensors(folder: Path, cfg: dict[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    """CompactLLM's tensors under llama.cpp's GPT-2 names (q/k/v fused, missing biases as zeros)."""
    tensors = dict(_tensors(folder))
    C, n_layer = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    inter = int(cfg["intermediate_size"])

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        return tensors[name] if name in tensors else np.zeros(shape, dtype=np.float32)  # bias=False: zeros are exact

    yield "token_embd.weight", tensors["model.embed_tokens.weight"]
    yield "position_embd.weight", tensors["model.embed_positions.weight"]
    for i in range(n_layer):
        p = f"model.layers.{i}."
        yield f"blk.{i}.attn_norm.weight", tensors[p + "input_layernorm.weight"]
        yield f"blk.{i}.attn_norm.bias", get(p + "input_layernorm.bias", (C,))
        qkv = [p + f"self_attn.{x}_proj." for x in "qkv"]
        yield f"blk.{i}.attn_qkv.weight", np.concatenate([tensors[n + "weight"] for n in qkv], axis=0)  # (3C, C)
        yield f"blk.{i}.attn_qkv.bias", np.concatenate([get(n + "bias", (C,)) for n in qkv])
        yield f"blk.{i}.attn_output.weight", tensors[p + "self_attn.o_proj.weight"]
        yield f"blk.{i}.attn_output.bias", get(p + "self_attn.o_proj.bias", (C,))
        yield f"blk.{i}.ffn_norm.weight", tensors[p + "post_attention_layernorm.weight"]
        yield f"blk.{i}.ffn_norm.bias", get(p + "post_attention_layernorm.bias", (C,))
        yield f"blk.{i}.ffn_up.weight", tensors[p + "mlp.up_proj.weight"]
        yield f"blk.{i}.ffn_up.bias", get(p + "mlp.up_proj.bias", (inter,))
        yield f"blk.{i}.ffn_down.weight", tensors[p + "mlp.down_proj.weight"]
        yield f"blk.{i}.ffn_down.bias", get(p + "mlp.down_proj.bias", (C,))
    yield "output_norm.weight", tensors["model.norm.weight"]
    yield "output_norm.bias", get("model.norm.bias", (C,))
    if not cfg.get("tie_word_embeddings", True) and "lm_head.weight" in tensors:
        yield "output.weight", tensors["lm_head.weight"]


def _llama_like_tensors(folder: Path, cfg: dict[str, Any], arch: str) -> Iterator[tuple[str, np.ndarray]]:
    """Llama/Mistral/Qwen2 tensors under llama.cpp's names (gguf's own name map), q/k permuted for `llama`."""
    gguf = _gguf()
    n_head, n_kv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA if arch == "llama" else gguf.MODEL_ARCH.QWEN2, int(cfg["num_hidden_layers"]))
    tied = bool(cfg.get("tie_word_embeddings", False))
    for name, data in _tensors(folder):
        if name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
            continue  # recomputed by llama.cpp / the same tensor as the embedding
        new = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise EngineError(key="error.gguf.tensor_name", name=name, arch=arch)
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = _permute(data, n_head, n_head)
        elif arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = _permute(data, n_head, n_kv)
        yield new, data


def _qtype(name: str, data: np.ndarray, wanted: str) -> Any:
    """The GGML type one tensor is stored in, for the requested file type."""
    q = _gguf().GGMLQuantizationType
    if data.ndim <= 1 or name.endswith(".bias") or name == "rope_freqs.weight":
        return q.F32  # norms, biases, rope factors: tiny, and precision matters there
    if wanted == "f16":
        return q.F16
    if data.shape[-1] % 32 != 0:
        return q.F16  # rows must be whole blocks of 32 weights
    if wanted == "q4_0" and name in ("token_embd.weight", "output.weight", "position_embd.weight"):
        return q.Q8_0
    return q.Q8_0 if wanted == "q8_0" else q.Q4_0


def _add_hparams(writer: Any, cfg: dict[str, Any], arch: str) -> None:
    if arch == "gpt2":
        writer.add_context_length(int(cfg["max_position_embeddings"]))
        writer.add_embedding_length(int(cfg["hidden_size"]))
        writer.add_feed_forward_length(int(cfg["intermediate_size"]))
        writer.add_block_count(int(cfg["num_hidden_layers"]))
        writer.add_head_count(int(cfg["num_attention_heads"]))
        writer.add_layer_norm_eps(float(cfg.get("layer_norm_eps", 1e-5)))
        return
    gguf = _gguf()
    n_head = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // n_head)
    writer.add_context_length(int(cfg["max_position_embeddings"]))
    writer.add_embedding_length(int(cfg["hidden_size"]))
    writer.add_feed_forward_length(int(cfg["intermediate_size"]))
    writer.add_block_count(int(cfg["num_hidden_layers"]))
    writer.add_head_count(n_head)
    writer.add_head_count_kv(int(cfg.get("num_key_value_heads") or n_head))
    writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(int(cfg["vocab_size"]))
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))))
    writer.add_rope_dimension_count(head_dim)
    if head_dim != int(cfg["hidden_size"]) // n_head:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if rope.get("rope_type", rope.get("type")) == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))


@dataclass
class GgufResult:
    """What an export wrote: the folder, the .gguf file and its Modelfile, and what it took."""

    folder: Path
    gguf_path: Path
    modelfile: Path
    arch: str
    type: str
    bytes: int
    seconds: float
    tensors: int
    template_checked: bool


def export_gguf(source: str | Path, out_dir: str | Path, settings: GgufSettings | None = None, *, name: str = "model") -> GgufResult:
    """Write the model folder `source` (config.json, safetensors, tokenizer) to `out_dir/<name>-<type>.gguf` with its
    Modelfile and gguf_info.json. Raises EngineError with the reason when the model cannot be written."""
    from transformers import AutoTokenizer

    from ..runs import atomic_replace_dir
    from .gguf_vocab import add_vocab, end_tokens, vocab_metadata
    from .modelfile import modelfile_text

    gguf = _gguf()
    settings = settings or GgufSettings()
    source, out_dir = Path(source), Path(out_dir)
    cfg = _read_config(source)
    if (reason := gguf_support(cfg)) is not None:
        raise EngineError(key=reason.key, **reason.params)
    arch = GGUF_ARCHS[cfg["model_type"]]
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        raise EngineError(key="error.gguf.needs_tokenizer", folder=source.name, detail=str(exc)) from exc
    vocab = vocab_metadata(tokenizer, source, int(cfg["vocab_size"]))
    file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[settings.type]
    gguf_name = f"{name}-{settings.type}.gguf"

    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    t0 = time.perf_counter()
    try:
        writer = gguf.GGUFWriter(str(tmp / gguf_name), arch)
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(name)
        writer.add_file_type(int(file_type))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        _add_hparams(writer, cfg, arch)
        add_vocab(writer, vocab)
        tensors = _compact_tensors(source, cfg) if arch == "gpt2" else _llama_like_tensors(source, cfg, arch)
        count = 0
        for tname, data in tensors:
            qtype = _qtype(tname, data, settings.type)
            writer.add_tensor(tname, gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), qtype), raw_dtype=qtype)
            count += 1
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if arch == "llama" and rope.get("rope_type") == "llama3":
            head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
            writer.add_tensor("rope_freqs.weight", _llama3_rope_freqs(rope, head_dim))
            count += 1
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        seconds = time.perf_counter() - t0
        text, checked = modelfile_text(gguf_name, tokenizer, end_tokens(vocab), settings.preset, int(cfg.get("max_position_embeddings", 2048)),
                                       adds_bos=bool(vocab["add_special"].get("bos")))
        (tmp / "Modelfile").write_text(text, encoding="utf-8")
        size = (tmp / gguf_name).stat().st_size
        info = {"source_model_type": cfg["model_type"], "architecture": arch, "type": settings.type, "file": gguf_name, "bytes": size,
                "tensors": count, "export_seconds": round(seconds, 3), "chat_template_in_modelfile": checked,
                "tokenizer": vocab["model"], "pre_tokenizer": vocab["pre"], "preset": settings.preset, "gguf_package": _gguf_version()}
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        atomic_replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return GgufResult(folder=out_dir, gguf_path=out_dir / gguf_name, modelfile=out_dir / "Modelfile", arch=arch, type=settings.type,
                      bytes=size, seconds=seconds, tensors=count, template_checked=checked)


def _gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")


def result_dict(result: GgufResult) -> dict[str, Any]:
    """A GgufResult as JSON-ready values (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()}
