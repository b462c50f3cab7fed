"""GGUF export: time and file size per type (f16, q8_0, q4_0), for the built-in models and Llama-shaped models.

Not a test: it prints a markdown table. Baselines measured in the same run: saving the same weights with
`save_pretrained` (safetensors, fp32 and fp16), i.e. what a run folder or a merged model already costs.

    python bench/export.py [--quick] [--runs DIR] [--repeats N]

Models (weights do not change export time or size, so where no trained copy exists the preset's exact
architecture is built with random weights, and the table says which):
- builtin:compact-mini: the pretrained built-in from --runs when found, else random weights of its preset;
- compact-course: the course's GPT preset (random weights);
- tiny Llama: 2 layers, hidden 64, GQA 4:2, the test suite's shape (tests/conftest.py build_tiny_hf_model);
- Llama 135M: SmolLM2-135M's shape (30 layers, hidden 576, GQA 9:3, vocab 49152), random weights (skipped with --quick).
Times are the min and median of --repeats exports (writer + numpy quantization + tokenizer + Modelfile).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402


def _tokenizer(vocab: int):
    from engine.data.formats import load_records, record_texts
    from engine.models.tokenizer import train_tokenizer

    return train_tokenizer(record_texts(load_records("builtin:corpus")), vocab_size=vocab, model_max_length=256)


def _save(model, tokenizer, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def _compact(preset: str, root: Path, runs: Path | None) -> tuple[Path, str]:
    from engine.models.compact import new_compact_model
    from engine.models.references import builtin_weights_dir

    pretrained = builtin_weights_dir(preset, runs) if runs is not None else None  # a rebuilt copy, else the shipped one
    if pretrained is not None:
        return pretrained, f"builtin:{preset} (pretrained)"
    tok = _tokenizer(2048)
    model = new_compact_model(preset, tok, vocab_size=len(tok), seed=0)
    return _save(model, tok, root / preset), f"{preset} (random weights)"


def _llama(name: str, root: Path, **shape) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tokenizer(2048)
    vocab = max(len(tok), shape.pop("vocab", len(tok)))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id, **shape))
    return _save(model, tok, root / name)


def _timed(fn, repeats: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), out


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Skip the 135M Llama.")
    parser.add_argument("--runs", default=None, help="Runs folder with a pretrained builtin:compact-mini (default: $COMPACT_LAB_RUNS).")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    import engine.models.compact  # noqa: F401 - registers CompactLLM
    from engine.config import GgufSettings
    from engine.export.gguf import export_gguf

    runs = Path(args.runs or os.environ.get("COMPACT_LAB_RUNS", ROOT / "runs"))
    root = Path(tempfile.mkdtemp(prefix="bench-export-"))
    try:
        models = [_compact("compact-mini", root, runs), _compact("compact-course", root, None),
                  (_llama("tiny-llama", root, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=64), "tiny Llama (random weights)")]
        if not args.quick:
            models.append((_llama("llama-135m", root, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                                  num_key_value_heads=3, max_position_embeddings=2048, vocab=49152, tie_word_embeddings=True),
                           "Llama 135M, SmolLM2-135M shape (random weights)"))
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeats} repeats (min / median)\n")
        print("| model | params | format | file MiB | seconds (min / median) |")
        print("|---|---:|---|---:|---:|")
        for folder, label in models:
            model = AutoModelForCausalLM.from_pretrained(str(folder))
            params = sum(p.numel() for p in model.parameters())
            for dtype, tag in ((torch.float32, "safetensors fp32 (baseline)"), (torch.float16, "safetensors fp16 (baseline)")):
                dest = root / f"st-{folder.name}-{tag[12:16]}"
                best, med, _ = _timed(lambda d=dest, dt=dtype, m=model: (shutil.rmtree(d, ignore_errors=True), m.to(dt).save_pretrained(d)), args.repeats)
                size = sum(p.stat().st_size for p in dest.glob("*.safetensors"))
                print(f"| {label} | {params:,} | {tag} | {_mib(size)} | {best:.3f} / {med:.3f} |")
            for gtype in ("f16", "q8_0", "q4_0"):
                out = root / f"gguf-{folder.name}-{gtype}"
                best, med, result = _timed(lambda o=out, g=gtype, f=folder: export_gguf(f, o, GgufSettings(type=g), name=f.name), args.repeats)
                print(f"| {label} | {params:,} | GGUF {gtype} ({result.arch}) | {_mib(result.bytes)} | {best:.3f} / {med:.3f} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
