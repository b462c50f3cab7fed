"""GGUF export (engine/export/gguf.py, gguf_vocab.py, modelfile.py, gguf_run.py), checked by independent readers.

Tiny Llama, Qwen2 and Mistral models and the built-in compact model (exported as llama.cpp's GPT-2) are built
locally, written to GGUF, then
- read back with the gguf package's own GGUFReader: architecture, hyperparameters, tensor names and shapes,
  tokenizer (tokens, types, merges, special ids), chat template;
- loaded with transformers' own GGUF loader (`from_pretrained(dir, gguf_file=...)`) and compared with the source:
  greedy tokens equal on chat prompts for f16 and q8_0, logits within F16_TOL / Q8_TOL, the tokenizer encodes and
  the chat template renders the same;
- the Modelfile's Go template is executed by a small evaluator of the Go-template subset it uses and must render
  exactly what the Jinja template renders.
llama.cpp itself runs in `test_llama_cpp_generates` (marker `llamacpp`, deselected by default: it needs
`pip install llama-cpp-python`, which compiles llama.cpp; run with `pytest -m llamacpp tests/export/test_gguf.py`).
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import build_tiny_hf_model, build_tiny_model, finish_run, make_adapter_run

from engine.cli import main as cli_main
from engine.config import GgufSettings, TrainConfig
from engine.errors import EngineError
from engine.export.gguf import export_gguf, gguf_support
from engine.export.gguf_run import export_ref_gguf, gguf_check, zip_export
from engine.models.references import builtin_model_dir

gguf = pytest.importorskip("gguf")

# Max |logit difference| against the fp32 source, tiny models (hidden 64). f16 only rounds the weights; q8_0 adds
# 8-bit blocks (an error of ~0.4% of a block's largest weight per weight); q4_0 is checked for loading only.
F16_TOL, Q8_TOL = 0.05, 0.5
PROMPTS = ["what color is the sky", "where do fish live", "say hello"]
KINDS = ("llama", "qwen2", "mistral", "compact")
ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "compact": "gpt2"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf-src")
    out = {kind: build_tiny_hf_model(root / kind, kind) for kind in ("llama", "qwen2", "mistral")}
    out["compact"] = build_tiny_model(root / "compact", bias=False, steps=60)  # bias=False: the zero biases path
    return out


@pytest.fixture(scope="module")
def exported(sources, tmp_path_factory) -> dict[tuple[str, str], object]:
    root = tmp_path_factory.mktemp("gguf-out")
    return {(kind, t): export_gguf(sources[kind], root / f"{kind}-{t}", GgufSettings(type=t), name=f"tiny-{kind}")
            for kind in KINDS for t in ("f16", "q8_0", "q4_0")}


def _source(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import engine.models.compact  # noqa: F401 - registers CompactLLM with the Auto classes

    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


def _from_gguf(result):
    """transformers' own GGUF loader. For GPT-2 it maps GGUF's context and feed-forward lengths onto config fields GPT2 does
    not read (n_ctx, feed_forward_length) and keeps n_positions=1024, n_inner=4*n_embd; we pass the config it parsed with
    those two fixed (a transformers gap: llama.cpp reads the file's own values)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(result.folder), result.gguf_path.name
    kwargs = {}
    if result.arch == "gpt2":
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        config.n_positions, config.n_inner = config.n_ctx, config.feed_forward_length
        kwargs["config"] = config
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **kwargs).eval(), AutoTokenizer.from_pretrained(folder, gguf_file=name)


# The tiny SentencePiece-style test tokenizer adds no '▁' to text that follows a special token ("<s>[INST]"), while
# transformers' GGUF tokenizer (like llama.cpp, and like the real Mistral tokenizer) does; that is a property of the test
# tokenizer, so for it the chat prompt's ids are compared through the source tokenizer only.
_SPM_NOTE = None


def _chat_ids(tokenizer, prompt: str) -> torch.Tensor:
    enc = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    return enc["input_ids"]


def _greedy(model, ids: torch.Tensor, n: int = 8) -> list[int]:
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, pad_token_id=0,
                         eos_token_id=None, temperature=None, top_p=None, top_k=None)
    return out[0, ids.shape[1]:].tolist()


def _fields(path: Path) -> tuple[dict, dict]:
    reader = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in reader.fields.items()}, {t.name: t for t in reader.tensors}


@pytest.mark.parametrize("kind", KINDS)
def test_reader_sees_architecture_metadata_tensors_and_tokenizer(kind, sources, exported):
    model, tokenizer = _source(sources[kind])
    cfg = model.config
    for t in ("f16", "q8_0", "q4_0"):
        result = exported[(kind, t)]
        fields, tensors = _fields(result.gguf_path)
        arch = ARCH[kind]
        assert fields["general.architecture"] == arch and result.arch == arch
        assert fields["general.file_type"] == {"f16": 1, "q8_0": 7, "q4_0": 2}[t]
        assert fields[f"{arch}.block_count"] == cfg.num_hidden_layers
        assert fields[f"{arch}.embedding_length"] == cfg.hidden_size
        assert fields[f"{arch}.attention.head_count"] == cfg.num_attention_heads
        assert fields[f"{arch}.context_length"] == cfg.max_position_embeddings
        if arch != "gpt2":
            assert fields[f"{arch}.attention.head_count_kv"] == cfg.num_key_value_heads == 2
        # tensors: names as llama.cpp expects them, shapes in ggml order (reversed), types per the rules
        assert tensors["token_embd.weight"].shape.tolist() == [cfg.hidden_size, cfg.vocab_size]
        assert ("output.weight" in tensors) == (kind in ("llama", "mistral"))  # tied heads are not written twice
        names = {"attn_qkv", "ffn_up", "ffn_down", "attn_output"} if arch == "gpt2" else {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
        for i in range(cfg.num_hidden_layers):
            assert {f"blk.{i}.{n}.weight" for n in names} <= set(tensors)
        if arch == "gpt2":
            assert tensors["blk.0.attn_qkv.weight"].shape.tolist() == [cfg.hidden_size, 3 * cfg.hidden_size]
            assert "position_embd.weight" in tensors and "blk.1.attn_qkv.bias" in tensors
        else:
            assert tensors["blk.0.attn_k.weight"].shape.tolist() == [cfg.hidden_size, 2 * cfg.hidden_size // cfg.num_attention_heads]
        assert ("blk.0.attn_q.bias" in tensors) == (kind == "qwen2")
        q = gguf.GGMLQuantizationType
        assert tensors["output_norm.weight"].tensor_type == q.F32
        layer = "blk.0.attn_qkv.weight" if arch == "gpt2" else "blk.0.attn_q.weight"
        assert tensors[layer].tensor_type == {"f16": q.F16, "q8_0": q.Q8_0, "q4_0": q.Q4_0}[t]
        assert tensors["token_embd.weight"].tensor_type == {"f16": q.F16, "q8_0": q.Q8_0, "q4_0": q.Q8_0}[t]
        # tokenizer
        vocab = tokenizer.get_vocab()
        by_id = {i: tok for tok, i in vocab.items()}
        assert fields["tokenizer.ggml.tokens"] == [by_id[i] for i in range(cfg.vocab_size)]
        assert fields["tokenizer.ggml.model"] == ("llama" if kind == "mistral" else "gpt2")
        assert fields["tokenizer.ggml.eos_token_id"] == tokenizer.eos_token_id
        assert fields["tokenizer.ggml.bos_token_id"] == tokenizer.bos_token_id
        assert fields["tokenizer.chat_template"] == tokenizer.chat_template
        types = fields["tokenizer.ggml.token_type"]
        assert types[tokenizer.eos_token_id] == 3  # CONTROL: llama.cpp keeps it whole and never prints it
        if kind == "mistral":
            assert types[vocab["<0x41>"]] == 6 and len(fields["tokenizer.ggml.scores"]) == cfg.vocab_size
        else:
            assert fields["tokenizer.ggml.pre"] == "smollm"  # single digits + the GPT-2 split, as engine/models/tokenizer.py
            assert fields["tokenizer.ggml.merges"][:3] == [" ".join(m) for m in json.loads((sources[kind] / "tokenizer.json").read_text())["model"]["merges"][:3]]


@pytest.mark.parametrize("kind", KINDS)
def test_transformers_gguf_loader_matches_the_source(kind, sources, exported):
    model, tokenizer = _source(sources[kind])
    for t, tol in (("f16", F16_TOL), ("q8_0", Q8_TOL)):
        loaded, gguf_tok = _from_gguf(exported[(kind, t)])
        for prompt in PROMPTS:
            ids = _chat_ids(tokenizer, prompt)
            assert gguf_tok(prompt)["input_ids"] == tokenizer(prompt)["input_ids"], f"{kind} {t}: the GGUF tokenizer encodes {prompt!r} differently"
            if kind != "mistral":  # SentencePiece after a special token: see _SPM_NOTE
                assert torch.equal(_chat_ids(gguf_tok, prompt), ids), f"{kind} {t}: the GGUF tokenizer encodes the chat prompt differently"
            with torch.no_grad():
                diff = (model(ids).logits - loaded(ids).logits).abs().max().item()
            assert diff < tol, f"{kind} {t}: logits differ by {diff:.4f} (tolerance {tol})"
            assert _greedy(model, ids) == _greedy(loaded, ids), f"{kind} {t}: greedy tokens differ on {prompt!r}"
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]
        assert gguf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
            tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_q4_0_loads_and_is_smallest(exported):
    for kind in KINDS:
        sizes = {t: exported[(kind, t)].bytes for t in ("f16", "q8_0", "q4_0")}
        assert sizes["q4_0"] < sizes["q8_0"] < sizes["f16"]
    model, _ = _from_gguf(exported[("llama", "q4_0")])
    assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


# -- the Modelfile: a Go-template evaluator for the subset go_template writes ------------------------

_ACTION = re.compile(r"\{\{\s*(.*?)\s*\}\}", re.S)


def _go_render(template: str, messages: list[dict]) -> str:
    """Execute `template` (literal text, range .Messages, if/else if/end on eq .Role, the first-message test, .Content)."""
    parts, pos = [], 0
    for m in _ACTION.finditer(template):
        parts += [("text", template[pos:m.start()]), ("act", m.group(1))]
        pos = m.end()
    parts.append(("text", template[pos:]))

    def run(i: int, msg: dict | None, until: tuple[str, ...]) -> tuple[str, int, str]:
        out = ""
        while i < len(parts):
            kind, val = parts[i]
            if kind == "text":
                out += val
                i += 1
            elif val.startswith(until) or val == "end" and "end" in until:
                return out, i, val
            elif val == '"{{"':
                out, i = out + "{{", i + 1
            elif val == ".Content":
                out, i = out + msg["content"], i + 1
            elif val == "range .Messages":
                start, body_end = i + 1, i + 1
                for message in messages:
                    text, body_end, _ = run(start, message, ("end",))
                    out += text
                if not messages:
                    body_end = run(start, {"role": "", "content": ""}, ("end",))[1]
                i = body_end + 1
            elif val.startswith("if "):
                taken, cond, j = False, val[3:], i + 1
                while True:
                    if not taken and _cond(cond, msg, messages):
                        text, j, stop = run(j, msg, ("else", "end"))
                        out, taken = out + text, True
                    else:
                        _, j, stop = run(j, msg, ("else", "end"))
                    if stop == "end":
                        break
                    cond = stop[len("else if "):] if stop.startswith("else if ") else "true"
                    j += 1
                i = j + 1
            else:
                raise AssertionError(f"unexpected action {val!r}")
        return out, i, ""

    return run(0, None, ())[0]


def _cond(cond: str, msg: dict | None, messages: list[dict]) -> bool:
    if cond == "true":
        return True
    if m := re.fullmatch(r'eq \.Role "(\w+)"', cond):
        return msg is not None and msg["role"] == m.group(1)
    if cond == 'or (not .Messages) (ne (index .Messages 0).Role "system")':
        return not messages or messages[0]["role"] != "system"
    raise AssertionError(f"unexpected condition {cond!r}")


@pytest.mark.parametrize("kind", KINDS)
def test_modelfile_template_renders_like_the_chat_template(kind, sources, exported):
    _, tokenizer = _source(sources[kind])
    result = exported[(kind, "q8_0")]
    text = result.modelfile.read_text()
    assert f"FROM ./{result.gguf_path.name}\n" in text and result.template_checked
    assert f'PARAMETER stop "{tokenizer.eos_token}"' in text
    assert "PARAMETER temperature 0.7" in text and "PARAMETER top_p 0.9" in text  # the default preset: balanced
    template = re.search(r'TEMPLATE """(.*?)"""', text, re.S).group(1)
    conversations = [[{"role": "user", "content": "Convert 05/09/2023 to ISO."}],
                     [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]]
    if kind != "mistral":  # the [INST] format has no system role
        conversations.append([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    for messages in conversations:
        expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if kind == "mistral":
            expected = expected.removeprefix(tokenizer.bos_token)  # llama.cpp adds bos itself (add_bos_token in the file)
        assert _go_render(template, messages) == expected


CHATML_DEFAULT_SYSTEM = (  # as Qwen2.5 ships it: a default system turn when the conversation has none
    "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA31_PREAMBLE = (  # as Llama 3.1 ships it (without tools): bos, then a system turn that always opens with a preamble
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set msgs = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: December 2023\\n\\n' + sys + '<|eot_id|>' }}"
    "{% for m in msgs %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


@pytest.mark.parametrize("template", [CHATML_DEFAULT_SYSTEM, LLAMA31_PREAMBLE], ids=["chatml-default-system", "llama31-preamble"])
def test_templates_with_implicit_text_translate(template, sources, tmp_path):
    """Formats whose template writes text no single message shows (a default system turn, a preamble) still get a checked
    Go template, through the ChatML / Llama 3 layouts."""
    src = tmp_path / "src"
    shutil.copytree(sources["qwen2"], src)
    config = json.loads((src / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (src / "tokenizer_config.json").write_text(json.dumps(config))
    (src / "chat_template.jinja").unlink(missing_ok=True)
    result = export_gguf(src, tmp_path / "out", GgufSettings(type="f16", preset="precise"))
    text = result.modelfile.read_text()
    assert result.template_checked and "PARAMETER temperature 0\n" in text and "top_p" not in text
    template_go = re.search(r'TEMPLATE """(.*?)"""', text, re.S).group(1)
    _, tokenizer = _source(src)
    for messages in ([{"role": "user", "content": "hi"}], [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
                     [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]):
        assert _go_render(template_go, messages) == tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# -- runs, the built-in model, the CLI, refusals ---------------------------------------------------


@pytest.fixture()
def runs(tmp_path, sources) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(sources["compact"], builtin_model_dir("compact-mini", runs))
    return runs


def test_builtin_model_exports_and_zips(runs):
    assert gguf_check("builtin:compact-mini", runs) is None
    result = export_ref_gguf("builtin:compact-mini", runs, GgufSettings(type="q4_0"))
    assert result.folder == runs / "_exports" / "gguf-compact-mini-q4_0" and result.arch == "gpt2"
    info = json.loads((result.folder / "gguf_info.json").read_text())
    assert info["bytes"] == result.gguf_path.stat().st_size and info["type"] == "q4_0"
    with zipfile.ZipFile(zip_export(result.folder)) as zf:
        names = set(zf.namelist())
    assert {"gguf-compact-mini-q4_0/compact-mini-q4_0.gguf", "gguf-compact-mini-q4_0/Modelfile", "gguf-compact-mini-q4_0/gguf_info.json"} <= names


def test_lora_run_is_merged_then_exported(runs):
    make_adapter_run(runs, name="lora-g")
    finish_run(runs / "lora-g", TrainConfig(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=2, run_name="lora-g"))
    assert gguf_check("run:lora-g", runs) is None
    result = export_ref_gguf("lora-g", runs, GgufSettings(type="f16"))
    assert (runs / "lora-g" / "merged" / "config.json").exists()
    events = [json.loads(line) for line in (runs / "lora-g" / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "export" and events[-1]["format"] == "gguf" and events[-1]["bytes"] == result.bytes


def test_cli_export_gguf(runs, monkeypatch, capsys):
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs))
    assert cli_main(["export-gguf", "--run", "builtin:compact-mini", "--type", "q8_0", "--zip"]) == 0
    out = capsys.readouterr().out
    assert "compact-mini-q8_0.gguf" in out and "Modelfile" in out and ".zip" in out
    assert cli_main(["export-gguf", "--run", "builtin:compact-mini", "--type", "q5_k"]) == 2
    assert "type = 'q5_k' is not allowed" in capsys.readouterr().err
    assert cli_main(["export-gguf", "--run", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_unsupported_models_are_refused_with_the_reason(sources, tmp_path, runs):
    assert "gpt_neox" in gguf_support({"model_type": "gpt_neox"})
    assert "yarn" in gguf_support({"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    assert gguf_support({"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "factor": 8.0}}) is None
    src = tmp_path / "neox"
    shutil.copytree(sources["llama"], src)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt_neox"}))
    with pytest.raises(EngineError, match="no mapping onto a llama.cpp architecture"):
        export_gguf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.tmp").exists()
    (runs / "unfinished").mkdir()
    finish_run(runs / "unfinished", TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=2,
                                                run_name="unfinished"), done=False)
    assert "not finished" in gguf_check("unfinished", runs)


def test_llama3_rope_scaling_writes_rope_freqs(sources, tmp_path):
    src = tmp_path / "l3"
    shutil.copytree(sources["llama"], src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 64}
    (src / "config.json").write_text(json.dumps(cfg))
    result = export_gguf(src, tmp_path / "out", GgufSettings(type="f16"))
    fields, tensors = _fields(result.gguf_path)
    freqs = np.asarray(tensors["rope_freqs.weight"].data)
    assert freqs.shape == (8,) and freqs[0] == 1.0 and 1.0 < freqs[1] < 8.0 and (freqs[2:] == 8.0).all() and fields["llama.rope.freq_base"] == 500000.0


@pytest.mark.llamacpp
@pytest.mark.parametrize("gguf_type", ["f16", "q8_0"])
def test_llama_cpp_generates(gguf_type, sources, exported):
    """llama.cpp itself (llama-cpp-python) loads the files, tokenizes like the source tokenizer and generates the source
    model's greedy tokens."""
    llama_cpp = pytest.importorskip("llama_cpp")
    for kind in KINDS:
        model, tokenizer = _source(sources[kind])
        llm = llama_cpp.Llama(model_path=str(exported[(kind, gguf_type)].gguf_path), n_ctx=64, verbose=False, logits_all=True)
        for prompt in PROMPTS:  # llama.cpp's own tokenizer, from the file's vocabulary, merges and pre-tokenizer name
            assert llm.tokenize(prompt.encode(), add_bos=kind == "mistral", special=False) == tokenizer(prompt)["input_ids"], (kind, prompt)
        for prompt in PROMPTS:
            ids = _chat_ids(tokenizer, prompt)
            llm.reset()
            llm.eval(ids[0].tolist())
            out = []
            for _ in range(6):
                token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
                out.append(token)
                llm.eval([token])
            assert out == _greedy(model, ids, 6), (kind, gguf_type, prompt)


def test_the_pages_modelfile_decodes_as_the_runs_task(runs, sources):
    """The page's GGUF export writes the Modelfile's sampling from the run's task: greedy (temperature 0) for the date
    task, whose one right answer sampling only spoils; the mild chat sampling for instructions (issue 32)."""
    from engine.training.jobs import JobManager
    from engine.views.run_control import export_gguf_for_download

    jobs = JobManager(runs)
    for name, dataset, temperature in (("dates-g", "builtin:dates", "0"), ("chat-g", "builtin:instructions", "0.7")):
        shutil.copytree(sources["compact"], runs / name / "model")  # a full run: its model folder, nothing to merge
        finish_run(runs / name, TrainConfig(method="full", base_model="builtin:compact-mini", dataset=dataset, max_steps=2, run_name=name))
        export_gguf_for_download(jobs, name, "q4_0")
        modelfile = (runs / "_exports" / f"gguf-{name}-q4_0" / "Modelfile").read_text()
        assert f"PARAMETER temperature {temperature}\n" in modelfile
