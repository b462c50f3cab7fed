"""The model card (README.md) of a pushed run, written only from its config.yaml and events.jsonl.

`model_card` says what was pushed (adapter, merged model, full model), how it was trained, its results and how to
load it; it never holds a local path or a token. The reference helpers (`is_hub_model_id`, `public_ref`) and
`read_run_config` / `run_events` are also what engine/export/hub.py uses to check a run and clean the staged copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import ModelCardData

from ..objectives import OBJECTIVE_METHODS
from ..refs import HUB_OWNER_NAME_RE, NAMED_MODEL_REF_RE

HUB_URL = "https://huggingface.co"


def run_events(run_dir: Path) -> tuple[Any, list[dict[str, Any]]]:
    """(RunSummary, events) of a run folder: its state for `push_source`, its history for the card."""
    from ..runs import read_events, summarize
    from ..training.jobs import run_is_alive

    return summarize(run_dir, run_is_alive(run_dir)), read_events(run_dir)


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """The raw config.yaml mapping (raw, not validated: a card can still be written for an older run)."""
    try:
        data = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def is_hub_model_id(ref: str) -> bool:
    """True when `ref` names a model on the Hub (not builtin:/run:, not a folder on this machine)."""
    ref = (ref or "").strip()
    if not ref or ":" in ref or ref.startswith((".", "~", "/", "\\")) or not HUB_OWNER_NAME_RE.match(ref) or ".." in ref:
        return False
    return not Path(ref).exists()  # a relative folder that happens to look like owner/name


def public_ref(ref: str) -> str | None:
    """A model reference safe to publish: Hub ids and builtin:/run: names as they are, nothing for local paths."""
    ref = (ref or "").strip()
    if is_hub_model_id(ref) or NAMED_MODEL_REF_RE.match(ref):
        return ref
    return None


def _describe_base(ref: str) -> str:
    if is_hub_model_id(ref):
        return f"[{ref}]({HUB_URL}/{ref})"
    if ref.startswith("builtin:"):
        return (f"the built-in compact model `{ref.split(':', 1)[1]}` of Compact LLM Lab (pretrained locally on its sample "
                "corpus; **it is not on the Hugging Face Hub**)")
    if ref.startswith("run:"):
        return f"the output of an earlier Compact LLM Lab run `{ref.split(':', 1)[1]}` (not on the Hub)"
    return "a local model folder (not on the Hub)"


def _describe_data(ref: str, config: str = "", split: str = "") -> str:
    ref = (ref or "").strip()
    if ref.startswith("hub:"):
        name = ref[4:]
        extra = ", ".join(x for x in (f"config `{config}`" if config else "", f"split `{split}`" if split else "") if x)
        return f"[{name}]({HUB_URL}/datasets/{name})" + (f" ({extra})" if extra else "")
    if ref.startswith("builtin:"):
        return f"the built-in sample `{ref.split(':', 1)[1]}` of Compact LLM Lab"
    return f"an uploaded file `{Path(ref).name}`" if ref else "—"


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _duration(events: list[dict[str, Any]]) -> float | None:
    """Training time summed over sessions (start -> stopped/error/done), so a resumed run counts its pauses out."""
    total, start = 0.0, None
    for ev in events:
        if ev.get("type") == "start":
            start = ev.get("time")
        elif ev.get("type") in ("stopped", "error", "done") and start is not None and ev.get("time") is not None:
            total += ev["time"] - start
            start = None
    return total or None


def _hms(seconds: float | None) -> str:
    if not seconds:
        return "—"
    s = int(round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m {s % 60:02d}s" if s >= 3600 else f"{s // 60}m {s % 60:02d}s"


def _is_compact(folder: Path | None, base_ref: str, method: str) -> bool:
    """Is the pushed model (or the adapter's base) the CompactLLM architecture, unknown to plain transformers?"""
    if folder is not None:
        try:
            return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type") == "compact_llm"
        except (OSError, json.JSONDecodeError):
            pass
    return method == "scratch" or base_ref.startswith("builtin:")


def _merged_dtype(folder: Path) -> str:
    try:
        return str(json.loads((folder / "merge_info.json").read_text(encoding="utf-8")).get("dtype") or "")
    except (OSError, json.JSONDecodeError, AttributeError):
        return ""


def eval_results(summary: Any, events: list[dict[str, Any]], dataset: str, cfg: dict[str, Any]) -> list[Any]:
    """The run's measured results as huggingface_hub EvalResults (the Hub shows them on the model page): final eval
    loss and perplexity on the held-out data, and the date task's accuracy after training when it was scored."""
    from huggingface_hub import EvalResult

    done = next((e for e in reversed(events) if e.get("type") == "done"), {})
    evals = [e for e in events if e.get("type") == "eval"]
    data_id = dataset[4:] if dataset.startswith("hub:") else (dataset.replace("builtin:", "compact-llm-lab/") if dataset.startswith("builtin:")
                                                               else "uploaded-file")
    common = {"task_type": "text-generation", "task_name": "Causal language modeling", "dataset_type": data_id,
              "dataset_name": data_id,
              "dataset_split": "eval" if not cfg.get("eval_dataset") else str(cfg.get("eval_split") or "eval")}
    out = []
    loss = done.get("eval_loss", evals[-1].get("eval_loss") if evals else None)
    if loss is not None:
        out.append(EvalResult(metric_type="loss", metric_name="eval loss", metric_value=round(float(loss), 4), **common))
    if evals and evals[-1].get("perplexity") is not None:
        out.append(EvalResult(metric_type="perplexity", metric_name="eval perplexity", metric_value=round(float(evals[-1]["perplexity"]), 3), **common))
    after = (summary.task_scores or {}).get("after")
    if after is not None:
        out.append(EvalResult(task_type="text-generation", task_name="Date to ISO conversion", dataset_type="compact-llm-lab/dates",
                              dataset_name="Compact LLM Lab date task", metric_type="accuracy", metric_name="exact-match accuracy",
                              metric_value=round(float(after), 4)))
    return out


def model_card(run_dir: Path, what: str, repo_id: str, *, license: str | None = None, gguf_file: str | None = None) -> str:
    """README.md for the pushed folder: YAML front matter (huggingface_hub's ModelCardData, with eval_results) + what it
    is, how it was trained, results, usage (transformers/peft, and llama.cpp/Ollama when `gguf_file` is pushed too).

    Written only from config.yaml and events.jsonl; holds no local path and no token.
    """
    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    summary, events = run_events(run_dir)
    last = {}
    for ev in events:
        last[ev.get("type")] = ev  # latest event of each type
    done, start = last.get("done", {}), last.get("start", {})
    method = str(cfg.get("method") or summary.method or "")
    base_ref = str(cfg.get("base_model") or summary.base_model or "")
    is_adapter = what == "adapter"
    weights = str(cfg.get("tuning") or "lora") if method in OBJECTIVE_METHODS else method  # dpo/orpo/grpo: their tuning
    lora_like = weights in ("lora", "qlora")
    pushed = run_dir / ("merged" if what == "merged" else "model") if not is_adapter else None
    compact = _is_compact(pushed, base_ref, method)

    name = repo_id.split("/")[-1]
    dataset = str(cfg.get("dataset") or "")
    mix = _read_mix(run_dir)  # a mix of other runs' adapters (engine/training/mix.py): its card says so instead of a training recipe
    tags = ["compact-llm-lab", method or "fine-tuned"] + (["adapter-mix", str(mix.get("combination", ""))] if mix else [])
    if lora_like:
        tags += ["lora"] + (["peft"] if is_adapter else ["merged-lora"])
    if gguf_file:
        tags += ["gguf", "ollama"]
    card_data = ModelCardData(
        library_name="peft" if is_adapter else "transformers",
        base_model=base_ref if is_hub_model_id(base_ref) and method != "scratch" else None,
        datasets=[dataset[4:]] if dataset.startswith("hub:") else None,
        license=license or None,
        pipeline_tag="text-generation",
        tags=list(dict.fromkeys(t for t in tags if t)),
        model_name=name,
        eval_results=eval_results(summary, events, dataset, cfg) or None,
    )

    lora_name = ("QLoRA" if weights == "qlora" else "LoRA") + (f" ({method.upper()})" if method in OBJECTIVE_METHODS else "")
    data_desc = _describe_data(dataset, cfg.get("hub_config", ""), cfg.get("hub_split", ""))
    base_desc = _describe_base(base_ref)
    lines = ["---", card_data.to_yaml().strip(), "---", "", f"# {name}", ""]
    if method == "scratch":
        lines.append(f"A model trained from random weights on {data_desc}, with its own tokenizer and the architecture of "
                     f"{base_desc.replace('the built-in compact model', 'the built-in preset')}.")
    elif what == "adapter":
        lines.append(f"A {lora_name} adapter for {base_desc}, trained on {data_desc}.")
    elif what == "merged":
        dtype = _merged_dtype(run_dir / "merged")
        lines.append(f"A {lora_name} fine-tune of {base_desc} on {data_desc}, with the adapter merged into a "
                     f"{dtype + ' ' if dtype else ''}copy of the base: the base was reloaded unquantized and the adapter folded "
                     "into its weights (`merge_and_unload`), so this is a plain model that needs no peft.")
    else:
        lines.append(f"A full fine-tune (every weight trained) of {base_desc} on {data_desc}.")
    if mix:
        lines[-1] = (f"A {lora_name} {'adapter' if is_adapter else 'fine-tune'} for {base_desc} made by mixing the adapters of "
                     f"{len(mix['parents'])} runs with **{mix['combination']}** (peft's `add_weighted_adapter`)"
                     + ("." if is_adapter else ", then merged into a copy of the base (a plain model that needs no peft)."))
    lines += ["", "Trained with Compact LLM Lab (memory estimation, QLoRA/LoRA/full fine-tuning and generation on small GPUs and CPUs)."]
    if is_adapter and not is_hub_model_id(base_ref):
        public = public_ref(base_ref)
        lines += ["", "> **Note:** the base model of this adapter is not on the Hugging Face Hub, so the adapter can only be "
                  "applied to that same base (" + (f"`{public}`" if public else "a local folder") + "). To share a "
                  "self-contained model, push the merged model instead."]
        if public and public.startswith("builtin:"):
            lines += ["> With Compact LLM Lab and the same built-in base: "
                      f"`engine.models.loading.load_model(\"{public}\", adapter=\"{repo_id}\")`."]

    # -- training settings
    q = cfg.get("quant") or {}
    lora = cfg.get("lora") or {}
    rows: list[tuple[str, str]] = [("method", method or "—")]
    if weights == "qlora" or q.get("mode") in ("4bit", "8bit"):
        quant = "4-bit " + str(q.get("quant_type", "nf4")) if q.get("mode", "4bit") == "4bit" else "8-bit (LLM.int8)"
        if q.get("mode", "4bit") == "4bit" and q.get("double_quant", True):
            quant += ", double quantization"
        rows.append(("base quantization (bitsandbytes)", quant + f", compute dtype {q.get('compute_dtype', 'auto')}"))
    if lora_like:
        extras = [x for x, on in (("rsLoRA", lora.get("use_rslora")), ("DoRA", lora.get("use_dora"))) if on]
        rows.append(("LoRA", f"r = {lora.get('r', '—')}, alpha = {lora.get('alpha', '—')}, dropout = {lora.get('dropout', '—')}, "
                             f"targets = {lora.get('targets', '—')}" + (", " + ", ".join(extras) if extras else "")))
    micro, accum = cfg.get("micro_batch_size"), cfg.get("grad_accum", 1)
    rows += [
        ("steps", f"{done.get('steps', summary.step)}" + (f" (max_steps {cfg['max_steps']})" if cfg.get("max_steps") else
                                                          f" ({cfg.get('epochs', '—')} epochs)")),
        ("batch", f"{micro} × {accum} accumulation = {micro * accum if isinstance(micro, int) and isinstance(accum, int) else '—'} "
                  "sequences per step"),
        ("max sequence length", _fmt(cfg.get("max_seq_len"))),
        ("learning rate", f"{cfg.get('learning_rate', '—')} ({cfg.get('lr_scheduler', '—')}, warmup {cfg.get('warmup_ratio', '—')})"),
        ("optimizer", _fmt(cfg.get("optimizer"))),
        ("precision", f"{cfg.get('precision', '—')}" + (f" ({start['dtype']})" if start.get("dtype") else "")),
        ("gradient checkpointing", "yes" if cfg.get("grad_checkpointing") else "no"),
        ("loss on", "prompt and response" if cfg.get("train_on_prompt") else "responses only"),
        ("seed", _fmt(cfg.get("seed"))),
    ]
    if cfg.get("eval_dataset"):
        rows.append(("eval data", _describe_data(str(cfg["eval_dataset"]), split=str(cfg.get("eval_split", "")))))
    elif cfg.get("eval_fraction"):
        rows.append(("eval data", f"{cfg['eval_fraction']:.0%} of the training data held out"))
    if mix:
        lines += _mix_section(run_dir, mix, events)
    else:
        lines += ["", "## Training", "", "| setting | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]

    # -- results
    evals = [e for e in events if e.get("type") == "eval"]
    res: list[tuple[str, str]] = []
    if done.get("final_loss") is not None:
        res.append(("training loss (mean over the run)", _fmt(done["final_loss"])))
    if summary.last_loss is not None:
        res.append(("last logged training loss", _fmt(summary.last_loss)))
    if done.get("eval_loss") is not None:
        res.append(("final eval loss", _fmt(done["eval_loss"])))
    if summary.best_eval_loss is not None:
        res.append(("best eval loss", _fmt(summary.best_eval_loss)))
    if evals and evals[-1].get("perplexity") is not None:
        res.append(("eval perplexity", _fmt(evals[-1]["perplexity"], 2)))
    if summary.task_scores:
        res.append(("date-to-ISO task accuracy", " → ".join(f"{k} {v:.0%}" for k, v in summary.task_scores.items() if v is not None)))
    res.append(("training time", _hms(_duration(events))))
    measured, predicted = done.get("peak_gib", summary.measured_gib), done.get("predicted_gib", summary.predicted_gib)
    how = "process RSS peak" if start.get("device_kind") == "cpu" else "torch max allocated"
    res.append(("peak memory, measured", f"{measured:.2f} GiB ({how})" if measured is not None else "—"))
    res.append(("peak memory, predicted by the estimator", f"{predicted:.2f} GiB" if predicted is not None else "—"))
    if start.get("device"):
        res.append(("hardware", f"{start['device']} ({start.get('device_kind', '?')})"))
    lines += ["", "## Results", "", "| metric | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in res]]

    # -- usage
    repo = repo_id
    register = ["import engine.models.compact  # Compact LLM Lab: registers its CompactLLM architecture with transformers"] if compact else []
    if is_adapter:
        base_line = (f'base = AutoModelForCausalLM.from_pretrained("{base_ref}")' if is_hub_model_id(base_ref)
                     else "base = AutoModelForCausalLM.from_pretrained(...)  # the same base model this adapter was trained on")
        code = [*register, "from peft import PeftModel", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                base_line, f'model = PeftModel.from_pretrained(base, "{repo}")', f'tokenizer = AutoTokenizer.from_pretrained("{repo}")']
    else:
        code = [*register, "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                f'model = AutoModelForCausalLM.from_pretrained("{repo}")', f'tokenizer = AutoTokenizer.from_pretrained("{repo}")']
    code += ["", 'messages = [{"role": "user", "content": "Hello!"}]',
             'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)',
             "out = model.generate(**inputs, max_new_tokens=128)",
             'print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))']
    lines += ["", "## Usage", "", "```python", *code, "```"]
    if compact:
        lines += ["", "The CompactLLM architecture is not part of transformers: `import engine.models.compact` needs the `engine` package "
                  "of Compact LLM Lab on the Python path."]
    lines += _other_formats(repo, run_dir.name, gguf_file, is_adapter)
    if weights == "qlora" and is_adapter:
        lines += ["", "It was trained on a 4-bit (bitsandbytes) base; it loads on a 16-bit base too (best quality), or on a "
                  "4-bit one (`quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\")`) to "
                  "save memory."]
    return "\n".join(lines) + "\n"


def _other_formats(repo: str, run: str, gguf_file: str | None, is_adapter: bool) -> list[str]:
    """Usage snippets for the other formats: GGUF (llama.cpp, Ollama) when pushed, and how to make GGUF / ONNX locally."""
    lines = ["", "## Other formats", ""]
    if gguf_file:
        quant = gguf_file.rsplit("-", 1)[-1].removesuffix(".gguf").upper()
        lines += [f"`{gguf_file}` is this model in GGUF (tokenizer and chat template inside) for llama.cpp, Ollama and LM Studio; the "
                  "`Modelfile` beside it holds the chat template as Ollama's Go template, the stop tokens and the decoding settings.",
                  "", "```bash", f"ollama run hf.co/{repo}:{quant}", f"llama-cli -hf {repo} --hf-file {gguf_file} -cnv", "```", ""]
    elif not is_adapter:
        lines += ["GGUF for llama.cpp / Ollama (with an Ollama Modelfile), from the run folder in Compact LLM Lab:", "",
                  "```bash", f"python -m engine export-gguf --run {run} --type q8_0 --zip", "```", ""]
    lines += ["ONNX (CPU inference with ONNX Runtime, no PyTorch), from Compact LLM Lab's Playground → Export (ONNX) tab; the zip holds "
              "`model.onnx` with its weights file `model.onnx.data` and the tokenizer:", "", "```python",
              "import numpy as np, onnxruntime as ort", "from transformers import AutoTokenizer", "",
              'session = ort.InferenceSession("model.onnx")  # model.onnx.data must sit beside it',
              'tokenizer = AutoTokenizer.from_pretrained(".")', 'ids = tokenizer("Hello", return_tensors="np")["input_ids"]',
              'logits = session.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]', "```"]
    return lines


def _read_mix(run_dir: Path) -> dict[str, Any]:
    """A mixed run's mix.yaml (parents as a list), {} for any other run."""
    from ..runs import MIX_FILE

    try:
        data = yaml.safe_load((Path(run_dir) / MIX_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(data, dict) or not data.get("parents"):
        return {}
    return {**data, "parents": [p.strip() for p in str(data["parents"]).split(",") if p.strip()]}


def _mix_section(run_dir: Path, mix: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """The card's "Mix" section: each parent (its data and weight), the method and its settings, and the date-task
    accuracy of the base, each parent and the mix as the mix job measured them."""
    weights = [w.strip() for w in str(mix.get("weights") or "").split(",") if w.strip()] or ["1"] * len(mix["parents"])
    mixed = next((e for e in events if e.get("type") == "mix"), {})
    scores = {str(e.get("run")): e.get("accuracy") for e in events if e.get("type") == "mix_score"}
    base = next((e.get("accuracy") for e in events if e.get("type") == "task_score" and e.get("when") == "before"), None)
    rows = []
    for parent, weight in zip(mix["parents"], weights, strict=False):
        cfg = read_run_config(Path(run_dir).parent / parent)
        data = _describe_data(str(cfg.get("dataset") or ""), cfg.get("hub_config", ""), cfg.get("hub_split", "")) if cfg else "—"
        acc = scores.get(parent)
        rows.append(f"| {parent} | {cfg.get('method', '—') if cfg else '—'} on {data} | {weight} | {'—' if acc is None else f'{acc:.0%}'} |")
    mine = scores.get(Path(run_dir).name)
    settings = [f"method **{mix.get('combination')}**"]
    if mix.get("combination") in ("ties", "dare_linear", "dare_ties"):
        settings.append(f"density {mix.get('density')}")
    if mixed.get("rank") is not None:
        settings.append(f"rank {mixed['rank']}")
    lines = ["", "## Mix", "", "Parents (runs of Compact LLM Lab on the same base), " + ", ".join(settings) + ":", "",
             "| parent | trained as | weight | date-to-ISO accuracy |", "|---|---|---|---|", *rows]
    if base is not None or mine is not None:
        lines += ["", f"Date-to-ISO accuracy, measured together by the mix: base {'—' if base is None else f'{base:.0%}'}, "
                  f"this mix {'—' if mine is None else f'{mine:.0%}'}."]
    return lines
