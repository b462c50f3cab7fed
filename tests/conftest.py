"""Shared fixtures and helpers for every test folder: an offline environment, the tiny models and tokenizers
(built once per session, shared read-only), a tiny pretrained built-in model in a temp runs dir, the in-process
app, the bitsandbytes 4-bit helpers, the browser settings, and the data helpers (sample rows, a small tokenizer,
file writers, a fake Hub). Test modules import helpers from here, never from
each other."""

from __future__ import annotations

import atexit
import contextlib
import csv
import dataclasses
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from engine.config import QuantSettings
from engine.hardware.device import DeviceInfo
from engine.models.loading import LoadedModel, load_model
from engine.models.references import builtin_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory) -> Path:
    """A runs directory with the built-in compact-mini 'pretrained' for a few steps (fast, real code path)."""
    from engine.training.builtin import builtin_pretrain_config
    from engine.training.run import run_training

    runs = tmp_path_factory.mktemp("runs")
    cfg = dataclasses.replace(builtin_pretrain_config("compact-mini"), max_steps=4, micro_batch_size=4, max_seq_len=64, save_steps=100, logging_steps=1)
    run_training(cfg, runs / "_builtin" / "compact-mini", runs_dir=runs)
    assert (runs / "_builtin" / "compact-mini" / "model" / "config.json").exists()
    return runs


def wait_for_no_live_run(runs: Path, timeout: float = 120.0) -> None:
    """Wait until no run in `runs` has a live process. The session's runs folder is shared: a run that an earlier test
    watched to "finished" may still be exiting, and a start is refused while any run's process is alive."""
    import time

    from engine.training.jobs import JobManager

    jobs, deadline = JobManager(runs), time.time() + timeout
    while jobs.active() and time.time() < deadline:
        time.sleep(0.5)


@contextlib.contextmanager
def stop_requested_at(step: int):
    """Inside the block, a training run asks itself to stop (its STOP file) after optimizer step `step`, as the page's
    Stop does: the run saves a checkpoint there and exits as "stopped"."""
    from engine.training import callbacks

    real = callbacks.StopFileCallback.on_step_end

    def on_step_end(self, args, state, control, **kw):
        if state.global_step == step:
            self.stop_file.write_text("stop")
        return real(self, args, state, control, **kw)

    callbacks.StopFileCallback.on_step_end = on_step_end
    try:
        yield
    finally:
        callbacks.StopFileCallback.on_step_end = real


@contextlib.contextmanager
def running_app(runs: Path, *, launch: dict | None = None, **build_kwargs):
    """The whole app, launched in-process on a free local port (as `python app.py` serves it); closed on exit.
    launch: more arguments for demo.launch (auth, max_file_size...)."""
    import app

    demo = app.build_app(runs, **build_kwargs)
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True, **app.launch_options(),
                **{"mcp_server": bool(build_kwargs.get("mcp")), **(launch or {})})
    try:
        yield demo
    finally:
        demo.close()


# --- hostile inputs (tests/app/test_hostile_*.py, engine-level tests of shared mode) ---


def evil_hub_model(hub_cache: Path, marker: Path, repo: str = "evil/remote-code") -> str:
    """A Hub-style model in a Hugging Face cache folder whose config (and tokenizer config) point with auto_map to a
    .py file that would write `marker` when imported: it must never run. Returns the repo id."""
    snap = hub_cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True, exist_ok=True)
    (hub_cache / f"models--{repo.replace('/', '--')}" / "refs").mkdir(exist_ok=True)
    (hub_cache / f"models--{repo.replace('/', '--')}" / "refs" / "main").write_text("0" * 40)
    code = f"from pathlib import Path\nPath({str(marker)!r}).write_text('remote code ran')\nfrom transformers import PretrainedConfig\n" \
           "class EvilConfig(PretrainedConfig):\n    model_type = 'evilgpt'\n"
    (snap / "evil.py").write_text(code)
    (snap / "config.json").write_text(json.dumps({"model_type": "evilgpt", "architectures": ["EvilModel"], "auto_map": {
        "AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}, "hidden_size": 64, "num_hidden_layers": 2}))
    (snap / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]}}))
    return repo


def parquet_bomb(path: Path, rows: int = 3_000_000) -> Path:
    """A few KB of dictionary-encoded parquet holding `rows` copies of one instruction row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    idx = pa.array(np.zeros(rows, dtype=np.int8))
    col = pa.DictionaryArray.from_arrays(idx, pa.array(["x" * 200]))
    pq.write_table(pa.table({"instruction": col, "output": col}), path, row_group_size=rows)
    return path


def stubborn_run(runs: Path, name: str, owner: str | None) -> Any:
    """A run folder whose recorded process ignores its STOP file and SIGTERM (a run hung in a download or a save).
    owner: the key that started it (hashed as engine/training/jobs.py stores it). The caller reaps the process."""
    import hashlib
    import subprocess
    import sys

    from engine.config import TrainConfig
    from engine.runs import EventLog, save_config
    from engine.training.processes import proc_start_time

    run_dir = runs / name
    run_dir.mkdir(parents=True)
    save_config(run_dir, TrainConfig(run_name=name, base_model="builtin:compact-mini", dataset="builtin:dates"))
    if owner:
        (run_dir / "owner").write_text(hashlib.sha256(owner.encode()).hexdigest() + "\n")
    proc = subprocess.Popen([sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"],
                            start_new_session=True)
    (run_dir / "pid").write_text(f"{proc.pid} {proc_start_time(proc.pid) or ''}\n")
    EventLog(run_dir / "events.jsonl").write("start", run=name, method="lora", device_kind="cpu")
    return proc


# --- shared by several test folders (formerly in tests/models/test_loading.py) ---


CPU = DeviceInfo(kind="cpu", name="test cpu", total_gib=8.0, bf16=True)


EXCHANGES = [
    ("what color is the sky", "the sky is blue and the sun is bright"),
    ("what do cats like", "cats like to sleep in the warm sun"),
    ("where do fish live", "fish live in the water of the sea"),
    ("what is the capital of france", "the capital of france is paris"),
    ("how many legs has a dog", "a dog has four legs and a tail"),
    ("say hello", "hello there , how are you today"),
]


def chat_texts(tokenizer) -> list[str]:
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}, {"role": "assistant", "content": a}], tokenize=False
        )
        for q, a in EXCHANGES
    ]


def fit_and_save(model, tokenizer, dest: Path, steps: int) -> Path:
    """Train `model` a few full-batch steps on the chat exchanges (so that greedy outputs are not ties), then save it
    with its tokenizer into `dest`."""
    batch = tokenizer(chat_texts(tokenizer), return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        model(**batch, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def build_tiny_model(
    dest: Path, *, steps: int = 120, max_positions: int = 64, seed: int = 0, bias: bool = True
) -> Path:
    """Save a tiny trained CompactLLM + tokenizer into `dest` (about a second on a CPU).

    Hidden sizes are multiples of 32 so that bitsandbytes' 4-bit CPU path (which packs 32 output rows at
    a time) accepts every layer.
    """
    from engine.models.compact import CompactConfig, CompactForCausalLM
    from engine.models.tokenizer import train_tokenizer

    corpus = [f"{q} ? {a} ." for q, a in EXCHANGES] * 4
    tokenizer = train_tokenizer(corpus, vocab_size=320, model_max_length=max_positions)
    config = CompactConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max_positions,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        dropout=0.0,
        bias=bias,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = CompactForCausalLM(config)
    tokenizer.padding_side = "right"
    return fit_and_save(model, tokenizer, dest, steps)


@functools.cache
def tiny_model_dir(bias: bool = True) -> Path:
    """One trained tiny model per process and variant, shared read-only by all four test modules (tests copy
    it before changing anything). Removed when the process exits."""
    root = Path(tempfile.mkdtemp(prefix="compact-tiny-"))
    atexit.register(shutil.rmtree, root, True)
    return build_tiny_model(root / "model", bias=bias)


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    return tiny_model_dir()


def logits(loaded_or_model, text: str = "the sky is") -> torch.Tensor:
    model = getattr(loaded_or_model, "model", loaded_or_model)
    tokenizer = loaded_or_model.tokenizer
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).logits.float()


def make_adapter_run(runs: Path, name: str = "lora-1", method: str = "lora", seed: int = 1) -> torch.nn.Module:
    """Write a finished LoRA run on builtin:compact-mini with non-zero adapter weights; returns the peft model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir = builtin_model_dir("compact-mini", runs)
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    torch.manual_seed(seed)
    peft_model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    )
    run_dir = runs / name
    peft_model.save_pretrained(run_dir / "adapter")
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(run_dir / "adapter")
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"method": method, "base_model": "builtin:compact-mini"}))
    return peft_model.eval()


def finish_run(run_dir: Path, cfg, *, done: bool = True) -> None:
    """Write the config.yaml and events.jsonl a real run leaves behind (a TrainConfig `cfg`; evals, task scores, done)."""
    from engine.runs import EventLog, save_config

    save_config(run_dir, cfg)
    ev = EventLog(run_dir / "events.jsonl")
    import time

    t0 = time.time() - 100
    ev.write("start", time=t0, run=run_dir.name, method=cfg.method, base_model=cfg.base_model, dataset=cfg.dataset, resumed_from=None,
             device="Tesla T4", device_kind="cuda", dtype="float16")
    ev.write("memory", predicted_gib=3.21, predicted_total_gib=3.9, device="Tesla T4")
    ev.write("task_score", when="before", accuracy=0.1, n=20, examples=[])
    for step, loss in ((1, 2.5), (2, 1.75)):
        ev.write("progress", step=step, max_steps=2, loss=loss, mem_gib=2.9 + step / 10)
    ev.write("eval", step=1, eval_loss=1.5, perplexity=4.4817)
    ev.write("eval", step=2, eval_loss=1.25, perplexity=3.4903)
    if done:
        ev.write("task_score", when="after", accuracy=0.85, n=20, examples=[])
        ev.write("done", time=t0 + 95, output="adapter" if cfg.method in ("lora", "qlora") else "model", path=str(run_dir / "adapter"), steps=2,
                 final_loss=2.125, eval_loss=1.25, peak_gib=3.05, predicted_gib=3.21, duration_s=95.0)


# --- shared by several test folders (formerly in tests/models/test_bnb_safety.py) ---

QUANT = QuantSettings(mode="4bit", quant_type="nf4", double_quant=True)


def has_avx512bf16() -> bool:
    from bitsandbytes.functional import has_avx512bf16

    return bool(has_avx512bf16())


def load4(tiny_dir: Path) -> LoadedModel:
    return load_model(str(tiny_dir), QUANT, runs_dir=tiny_dir.parent, device=CPU, allow_local_paths=True)


def linear4bit_layers(model) -> list:
    import bitsandbytes as bnb

    return [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]


def allow_repack(model) -> None:
    """Restore bitsandbytes' default (what a model loaded without our loader has)."""
    for layer in linear4bit_layers(model):
        layer.support_avx512bf16_for_cpu = has_avx512bf16()


def lora_grads(loaded: LoadedModel) -> dict[str, torch.Tensor]:
    """Gradients of every LoRA weight for one fixed batch (same LoRA init every call)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(123)
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(loaded.model, config)
    model.train()
    batch = loaded.tokenizer(
        ["the sky is blue and the sun is bright", "cats like to sleep in the warm sun"],
        return_tensors="pt",
        padding=True,
    )
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    model(**batch, labels=labels).loss.backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def max_rel_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(((a[k] - b[k]).norm() / a[k].norm().clamp_min(1e-12)).item() for k in a)


@pytest.fixture(scope="module")
def fresh_grads(tiny_dir) -> dict[str, torch.Tensor]:
    return lora_grads(load4(tiny_dir))


# --- shared by several test folders (formerly in tests/app/test_browser.py) ---


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a browser-test module (Playwright); the module skips itself when either is missing."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


# --------------------------------------------------------------------------------------------------
# Data: sample rows, a small tokenizer trained on the built-in corpus, file writers, a fake Hub
# --------------------------------------------------------------------------------------------------

INSTRUCTION = {"instruction": "Traduza para o inglês.", "input": "Olá, mundo!", "output": "Hello, world!"}
LONG = {"instruction": "Resuma.", "input": "palavra " * 40, "output": "Um resumo curto com várias palavras."}
QA = [{"Question": "Quanto é 2+2?", "Answer": "4", "Context": ""}, {"Question": "Capital da França?", "Answer": "Paris", "Context": "Europa"}]
CHAT = [{"messages": [{"role": "user", "content": "Oi"}, {"role": "assistant", "content": "Olá!"}]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]}]


def corpus_tokenizer():
    """A fresh small BPE tokenizer (vocab 512, 256 positions) trained on the built-in corpus, with the chat template."""
    from engine.data.formats import load_records, record_texts
    from engine.models.tokenizer import train_tokenizer

    return train_tokenizer(record_texts(load_records("builtin:corpus")), vocab_size=512, model_max_length=256)


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_csv(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def trained_spans(example: dict, tokenizer) -> list[str]:
    """Decoded runs of consecutive trained-on labels."""
    from engine.data.tokenize import IGNORE_INDEX

    spans, run = [], []
    for label in example["labels"] + [IGNORE_INDEX]:
        if label != IGNORE_INDEX:
            run.append(label)
        elif run:
            spans.append(tokenizer.decode(run, skip_special_tokens=False))
            run = []
    return spans


def from_records(records: list[dict], fmt: str):
    """A RecordSet of already-normalized records, as if read from test.jsonl."""
    from engine.data.formats import RecordSet

    return RecordSet(records=records, format=fmt, source="test.jsonl")


@pytest.fixture
def fake_hub(monkeypatch):
    """datasets.load_dataset replaced by an in-memory Dataset; records the calls."""
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    calls: list[tuple[tuple, dict]] = []
    tables: dict[str, list[dict]] = {}

    def load_dataset(path, name=None, **kwargs):
        calls.append(((path, name), kwargs))
        if path not in tables:
            raise DatasetNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")
        return datasets.Dataset.from_list(tables[path])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return tables, calls


# --------------------------------------------------------------------------------------------------
# Tiny Hub-architecture models (Llama, Qwen2, Mistral) for the export tests: GGUF, ONNX
# --------------------------------------------------------------------------------------------------

# A Mistral-style chat template ([INST] ... [/INST] answer</s>, no system role), as Mistral 7B Instruct ships it.
INST_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
                 "{% elif m['role'] == 'assistant' %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}")


def spm_tokenizer(texts: list[str], vocab_size: int = 400):
    """A SentencePiece-style BPE tokenizer as Llama 2 / Mistral ship it in tokenizer.json: '▁' for spaces, byte fallback
    (<0x00>..<0xFF> in the vocabulary), <unk> <s> </s>, bos added to every encoding, the [INST] chat template."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    probe = Tokenizer(models.BPE())
    probe.normalizer = normalizer
    probe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size - 259, show_progress=False))
    learned = json.loads(probe.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{i:02X}>": 3 + i for i in range(256)}}
    for token in sorted(learned["vocab"], key=learned["vocab"].get):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    backend.normalizer = normalizer
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                        clean_up_tokenization_spaces=False, padding_side="right")
    tokenizer.pad_token = tokenizer.unk_token
    tokenizer.chat_template = INST_TEMPLATE
    return tokenizer


def build_tiny_hf_model(dest: Path, kind: str, *, steps: int = 40, seed: int = 0) -> Path:
    """A tiny trained Llama, Qwen2 or Mistral (2 layers, hidden 64, grouped-query attention 4:2) with a tokenizer, saved
    into `dest`. Llama and Qwen2 use the byte-level tokenizer of the compact models (engine/models/tokenizer.py),
    Mistral the SentencePiece-style one above; trained on the chat exchanges so that greedy outputs are not ties."""
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from engine.models.tokenizer import train_tokenizer

    corpus = [f"{q} ? {a} ." for q, a in EXCHANGES] * 4
    tokenizer = spm_tokenizer(corpus) if kind == "mistral" else train_tokenizer(corpus, vocab_size=320, model_max_length=64)
    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM), "mistral": (MistralConfig, MistralForCausalLM)}
    config_cls, model_cls = classes[kind]
    config = config_cls(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=kind == "qwen2")
    torch.manual_seed(seed)
    model = model_cls(config)
    return fit_and_save(model, tokenizer, dest, steps)


def form_api_values(upload: Any = None, **overrides: Any) -> list[Any]:
    """The fine-tune form's API values in the app's input order: (dataset upload, *form fields, eval upload), with the
    form's defaults, 2 steps, and `overrides` by field name."""
    from engine.config import TrainConfig
    from engine.fields import field_specs
    from engine.views.finetune_form import FT_DATA, FT_DEFAULTS, FT_LORA, FT_MAIN, FT_RUN, FT_TRAIN

    values = {**{s.name: s.default for s in field_specs(TrainConfig)}, **FT_DEFAULTS, "max_steps": 2, **overrides}
    return [upload, *[values[n] for n in FT_MAIN + FT_TRAIN + FT_LORA + FT_RUN + FT_DATA], None]


def gen_api_values(**overrides: Any) -> list[Any]:
    """The decoding settings' API values in field order: greedy, 2 new tokens, and `overrides` by field name."""
    from engine.config import GenerationSettings
    from engine.fields import field_specs

    values = {**{s.name: s.default for s in field_specs(GenerationSettings)}, "max_new_tokens": 2, "do_sample": False, **overrides}
    return [values[s.name] for s in field_specs(GenerationSettings)]


def make_lora_parent(runs: Path, name: str, *, r: int = 4, seed: int = 1, method: str = "lora", base: str = "builtin:compact-mini",
                     dora: bool = False, done: bool = True) -> Path:
    """A finished LoRA run on `runs`' built-in compact-mini with random (non-zero) adapter weights, its config.yaml a TrainConfig
    and its events those of a finished run (tests of mixing adapters: tests/training/test_mix.py, tests/app/test_mix_app.py)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.config import TrainConfig

    base_dir = builtin_model_dir("compact-mini", runs)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", init_lora_weights=False, use_dora=dora))
    run_dir = runs / name
    shutil.rmtree(run_dir, ignore_errors=True)
    peft_model.save_pretrained(run_dir / "adapter")
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(run_dir / "adapter")
    cfg = TrainConfig(method=method, base_model=base, dataset="builtin:dates" if seed == 1 else "builtin:instructions", run_name=name)
    cfg = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, r=r, alpha=2 * r))
    finish_run(run_dir, cfg, done=done)
    return run_dir
