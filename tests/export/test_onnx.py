"""Tests for engine/export/onnx.py: export of a compact model and of a merged LoRA model, ONNX Runtime logits
and greedy tokens against PyTorch, and the message when the optional packages are missing. CPU, offline.

Each export takes a few seconds (torch.export + decompositions), so every model is exported once per module.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CPU, logits, make_adapter_run, tiny_model_dir

from engine.config import QuantSettings
from engine.errors import EngineError
from engine.export.merge import merge_adapter
from engine.export.onnx import OnnxRunner, compare_onnx, export_onnx
from engine.models.loading import load_model
from engine.models.references import builtin_model_dir

PROMPTS = ["what color is the sky", "where do fish live", "the"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    tiny_dir = tiny_model_dir()
    loaded = load_model(str(tiny_dir), runs_dir=tiny_dir.parent, device=CPU, allow_local_paths=True)
    path = export_onnx(loaded, tmp_path_factory.mktemp("onnx") / "tiny")
    return loaded, path


def test_export_writes_a_self_contained_folder(tiny):
    loaded, path = tiny
    assert path.name == "model.onnx"
    files = {p.name for p in path.parent.iterdir()}
    assert {"model.onnx", "model.onnx.data", "onnx_info.json", "tokenizer.json"} <= files
    assert not list(path.parent.parent.glob(".*tmp*"))  # written under a temporary name, then renamed
    info = json.loads((path.parent / "onnx_info.json").read_text())
    assert info["inputs"] == ["input_ids", "attention_mask"]
    assert info["max_position_embeddings"] == 64 and loaded.tokenizer.eos_token_id in info["eos_token_ids"]
    runner = OnnxRunner(path.parent)  # the folder works as well as the file
    assert runner.tokenizer is not None and runner.input_names == ["input_ids", "attention_mask"]


def test_onnx_matches_pytorch_logits_and_greedy_tokens(tiny):
    loaded, path = tiny
    report = compare_onnx(loaded, path, PROMPTS, max_new_tokens=8)
    assert report["max_abs_logits_diff"] < 1e-4
    assert report["greedy_equal"], report["mismatches"]
    assert report["torch_tokens"] == report["onnx_tokens"] > 0
    assert report["torch_tokens_per_s"] > 0 and report["onnx_tokens_per_s"] > 0
    # the trained tiny model answers in words through ONNX Runtime too
    chat = [{"role": "user", "content": "what color is the sky"}]
    text = loaded.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    new = OnnxRunner(path).generate(loaded.tokenizer(text)["input_ids"], 16)
    assert "blue" in loaded.tokenizer.decode(new, skip_special_tokens=True)


def test_dynamic_batch_and_sequence_with_left_padding(tiny):
    loaded, path = tiny
    tok = loaded.tokenizer
    enc = tok(["the sky is blue and the sun is bright", "cats"], return_tensors="pt", padding=True)  # left padded
    onnx_logits = OnnxRunner(path).logits(enc["input_ids"].numpy(), enc["attention_mask"].numpy())
    with torch.no_grad():
        ref = loaded.model(**enc, use_cache=False).logits.numpy()
    real = enc["attention_mask"].numpy().astype(bool)  # padded positions carry no meaning
    assert onnx_logits.shape == ref.shape and np.abs(onnx_logits - ref)[real].max() < 1e-4
    # one token, one row: smaller than the example the graph was traced with
    one = OnnxRunner(path).logits(enc["input_ids"][:1, :1].numpy())
    assert one.shape == (1, 1, ref.shape[-1])


def test_merged_lora_model_exports_with_its_adapter(tmp_path):
    pytest.importorskip("onnxruntime")
    runs = tmp_path / "runs"
    shutil.copytree(tiny_model_dir(), builtin_model_dir("compact-mini", runs))
    make_adapter_run(runs, name="lora-x")
    merged_dir = merge_adapter(runs / "lora-x", device=CPU)
    path = export_onnx(merged_dir, tmp_path / "onnx-merged", runs_dir=runs)  # a folder, loaded for export

    merged = load_model(str(merged_dir), runs_dir=runs, device=CPU, allow_local_paths=True)
    report = compare_onnx(merged, path, PROMPTS[:2], max_new_tokens=6, stop_at_eos=False)
    assert report["max_abs_logits_diff"] < 1e-4 and report["greedy_equal"], report
    assert report["onnx_tokens"] == report["torch_tokens"] == 12  # stop_at_eos=False: exactly max_new_tokens each
    # the graph carries the adapter: same logits as the unmerged adapter model, not as the base
    adapter_model = load_model("run:lora-x", QuantSettings(mode="none"), runs_dir=runs, device=CPU)
    ids = adapter_model.tokenizer("the sky is", return_tensors="pt")["input_ids"]
    np.testing.assert_allclose(OnnxRunner(path).logits(ids.numpy()), logits(adapter_model).numpy(), atol=1e-4)


def test_export_refuses_quantized_models(tiny, tmp_path):
    loaded, _ = tiny
    int8 = load_model(loaded.ref, QuantSettings(mode="int8-dynamic"), device=CPU, allow_local_paths=True,
                      runs_dir=Path(loaded.ref).parent)
    with pytest.raises(EngineError, match="unquantized"):
        export_onnx(int8, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_missing_onnx_packages_say_what_to_install(monkeypatch, tmp_path):
    # None in sys.modules makes `import onnxruntime` raise ImportError, as in an environment without it.
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(EngineError, match=r"pip install -r requirements-onnx\.txt"):
        OnnxRunner(tmp_path / "model.onnx")
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    with pytest.raises(EngineError, match=r"onnxscript is missing.*pip install -r requirements-onnx\.txt"):
        export_onnx(tmp_path / "nothing", tmp_path / "out")


def test_downloaded_zip_runs_in_a_fresh_session_elsewhere(tiny, tmp_path):
    """The Playground's download (engine/views/playground.py): one zip that, unpacked in a folder of its own, loads in a new
    ONNX Runtime session with nothing else from this machine, and generates PyTorch's greedy tokens."""
    import zipfile

    import onnxruntime as ort
    from transformers import AutoTokenizer

    from engine.views.playground import onnx_export_check

    loaded, _ = tiny
    rows, archive = onnx_export_check(loaded, "builtin:tiny", "the sky is", tmp_path / "runs")
    assert dict((r[0], r[1]) for r in rows)["same greedy answers as PyTorch"] == "yes"  # in words (engine/views/playground.py onnx_rows)
    elsewhere = tmp_path / "elsewhere"
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        zf.extractall(elsewhere)
    folder = elsewhere / "onnx-builtin-tiny"
    assert {"onnx-builtin-tiny/model.onnx", "onnx-builtin-tiny/model.onnx.data", "onnx-builtin-tiny/tokenizer.json"} <= names
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])  # a new session, by path
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        new: list[int] = []
        for _ in range(8):
            feed = np.asarray([ids + new], dtype=np.int64)
            new.append(int(session.run(["logits"], {"input_ids": feed, "attention_mask": np.ones_like(feed)})[0][0, -1].argmax()))
        with torch.no_grad():
            out = loaded.model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), max_new_tokens=8,
                                        do_sample=False, eos_token_id=None, pad_token_id=0, temperature=None, top_p=None, top_k=None)
        assert new == out[0, len(ids):].tolist(), prompt


def test_missing_packages_are_listed_without_importing(monkeypatch):
    import importlib.util

    from engine.export.onnx import INSTALL_COMMAND, missing_packages

    assert missing_packages() == []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    assert missing_packages() == ["onnxscript"] and INSTALL_COMMAND == "pip install -r requirements-onnx.txt"
