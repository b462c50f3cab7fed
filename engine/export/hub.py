"""Push a finished run to the Hugging Face Hub: its LoRA adapter, its merged model, or its full model, with a
model card written from the run's config.yaml and events.jsonl.

Order of work, so that every mistake a person can fix is reported before anything touches the network:
repo id -> run state and what to push -> token -> offline mode -> (merge, when asked) -> upload.

What goes up is a *staging* folder in the system temp dir, never the run folder itself: the model card
(README.md) and copies of the small JSON files are rewritten there (peft and merge_adapter record local
absolute paths such as `/content/drive/.../runs/_builtin/...` in adapter_config.json, merge_info.json and
peft's own README), while the weights are symlinked, not copied (a merged 7B model is 14 GB). The run folder
only gains one `push` event (repo, url, what) - never the token.

The token comes from the caller, or from `$HF_TOKEN` (the CLI; the app asks for it in a password field and
does not fall back to the server's environment, see app.py). It is handed to `huggingface_hub.HfApi` in
memory only, never logged, and scrubbed from every error message we build from a library exception.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError, HubError
from ..refs import HUB_OWNER_NAME_RE, NAMED_MODEL_REF_RE

log = logging.getLogger(__name__)

PushWhat = Literal["adapter", "merged", "model"]
PUSH_WHATS: tuple[str, ...] = ("adapter", "merged", "model")
HUB_URL = "https://huggingface.co"

# Small JSON files that may carry a local path; rewritten in the staging copy. Vocabulary files
# (tokenizer.json, vocab.json, merges.txt) are left alone: their strings are tokens, not paths.
_JSON_TO_CLEAN = ("adapter_config.json", "config.json", "generation_config.json", "tokenizer_config.json",
                  "special_tokens_map.json", "merge_info.json", "preprocessor_config.json")
_NOT_SCANNED = {"tokenizer.json", "vocab.json", "merges.txt"}
_TEXT_SUFFIXES = {".json", ".md", ".txt", ".yaml", ".yml", ".jinja"}
# Hub user tokens (hf_...), also scrubbed when they are not the token we were given (e.g. one in a URL).
_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9_]{8,}")


# --------------------------------------------------------------------------------------------------
# Validation (no network)
# --------------------------------------------------------------------------------------------------


def check_repo_id(repo_id: str) -> str:
    """`owner/name` as on the Hub; ConfigError otherwise. The owner is required so that no extra
    "who am I" request is needed and a typo cannot land in an unexpected namespace."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo = (repo_id or "").strip()
    allowed = ("owner/name (your user or organization name, a slash, then the model name: letters, digits, "
               "'-', '_' and '.', at most 96 characters, e.g. alice/qwen-dates-lora)")
    if repo.startswith(HUB_URL + "/"):  # a pasted address is fine
        repo = repo[len(HUB_URL) + 1:].strip("/")
    if repo.count("/") != 1:
        raise ConfigError("repo_id", repo_id, allowed)
    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise ConfigError("repo_id", repo_id, allowed) from None
    return repo


def resolve_token(token: str | None = None, *, use_env: bool = True) -> str:
    """The token to push with: `token`, else `$HF_TOKEN` when use_env. HubError when there is none."""
    value = (token or "").strip()
    if not value and use_env:
        value = os.environ.get("HF_TOKEN", "").strip()
    if not value:
        where = "set HF_TOKEN in the environment or type it when asked" if use_env else "paste it in the token field"
        raise HubError("A Hugging Face access token with write permission is needed to push "
                       f"(create one at {HUB_URL}/settings/tokens): {where}.")
    if any(c.isspace() for c in value) or not value.isprintable():
        raise HubError("The Hugging Face token contains spaces or invisible characters: copy it again from "
                       f"{HUB_URL}/settings/tokens.")
    return value


def hub_offline() -> bool:
    """huggingface_hub's offline switch, read now (its own constant is read once at import)."""
    from huggingface_hub.constants import _is_true

    return bool(_is_true(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")))


def _run_events(run_dir: Path) -> tuple[Any, list[dict[str, Any]]]:
    from ..runs import read_events, summarize
    from ..training.jobs import run_is_alive

    return summarize(run_dir, run_is_alive(run_dir)), read_events(run_dir)


def push_source(run_dir: Path, what: str | None = None) -> tuple[str, Path]:
    """(what, folder) a push of this run would upload; HubError/ConfigError naming what is missing.

    what=None picks the run's own output: its adapter for LoRA/QLoRA runs, its model for full/scratch runs.
    """
    run_dir = Path(run_dir)
    name = run_dir.name
    if not (run_dir / "config.yaml").exists() and not (run_dir / "events.jsonl").exists():
        raise HubError(f"There is no run {name!r} to push.")
    summary, _ = _run_events(run_dir)
    if summary.state != "finished":
        raise HubError(f"Run {name!r} is {summary.state}, not finished: only a finished run has a final adapter or model "
                       "to push" + (" (resume it first)." if summary.resumable else "."))
    has_adapter = (run_dir / "adapter" / "adapter_config.json").exists()
    has_model = (run_dir / "model" / "config.json").exists()
    if what is None or what == "":
        what = "adapter" if has_adapter else "model"
    if what not in PUSH_WHATS:
        raise ConfigError("what", what, "adapter, merged or model")
    if what == "adapter":
        if has_model:
            raise HubError(f"Run {name!r} trained every weight: it has no LoRA adapter, push its model instead (what = model).")
        if not has_adapter:
            raise HubError(f"Run {name!r} has no adapter/ folder (adapter_config.json missing): nothing to push.")
        return what, run_dir / "adapter"
    if what == "merged":
        if has_model:
            raise HubError(f"Run {name!r} trained every weight: there is nothing to merge, push its model instead (what = model).")
        if not has_adapter:
            raise HubError(f"Run {name!r} has no LoRA adapter, so no merged model.")
        merged = run_dir / "merged"
        if not (merged / "config.json").exists():
            raise HubError(f"Run {name!r} has not been merged yet: merge it first (Fine-tune → 'Merge adapter into a 16-bit "
                           f"model', or `python -m engine merge {name}`; `push --merge` does both), or push the adapter.")
        if _newest_mtime(run_dir / "adapter") > _newest_mtime(merged):
            raise HubError(f"The merged copy of run {name!r} is older than its adapter (the run was trained again): merge it "
                           "again before pushing.")
        return what, merged
    if has_adapter and not has_model:
        raise HubError(f"Run {name!r} is a LoRA adapter, not a full model: push what = adapter, or merge it and push "
                       "what = merged.")
    if not has_model:
        raise HubError(f"Run {name!r} has no model/ folder (config.json missing): nothing to push.")
    return what, run_dir / "model"


def _newest_mtime(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=0.0)


# --------------------------------------------------------------------------------------------------
# Model card
# --------------------------------------------------------------------------------------------------


def _read_config(run_dir: Path) -> dict[str, Any]:
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


def _public_ref(ref: str) -> str | None:
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


def model_card(run_dir: Path, what: str, repo_id: str, *, license: str | None = None) -> str:
    """README.md for the pushed folder: YAML front matter + what it is, how it was trained, results, usage.

    Written only from config.yaml and events.jsonl; holds no local path and no token.
    """
    run_dir = Path(run_dir)
    cfg = _read_config(run_dir)
    summary, events = _run_events(run_dir)
    last = {}
    for ev in events:
        last[ev.get("type")] = ev  # latest event of each type
    done, start = last.get("done", {}), last.get("start", {})
    method = str(cfg.get("method") or summary.method or "")
    base_ref = str(cfg.get("base_model") or summary.base_model or "")
    is_adapter = what == "adapter"
    lora_like = method in ("lora", "qlora")
    pushed = run_dir / ("merged" if what == "merged" else "model") if not is_adapter else None
    compact = _is_compact(pushed, base_ref, method)

    meta: dict[str, Any] = {"library_name": "peft" if is_adapter else "transformers"}
    if is_hub_model_id(base_ref) and method != "scratch":
        meta["base_model"] = base_ref
    dataset = str(cfg.get("dataset") or "")
    if dataset.startswith("hub:"):
        meta["datasets"] = [dataset[4:]]
    if license:
        meta["license"] = license
    meta["pipeline_tag"] = "text-generation"
    tags = ["compact-llm-lab", method or "fine-tuned"]
    if lora_like:
        tags += ["lora"] + (["peft"] if is_adapter else ["merged-lora"])
    meta["tags"] = list(dict.fromkeys(t for t in tags if t))

    name = repo_id.split("/")[-1]
    lora_name = "QLoRA" if method == "qlora" else "LoRA"
    data_desc = _describe_data(dataset, cfg.get("hub_config", ""), cfg.get("hub_split", ""))
    base_desc = _describe_base(base_ref)
    lines = ["---", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).strip(), "---", "", f"# {name}", ""]
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
    lines += ["", "Trained with Compact LLM Lab (memory estimation, QLoRA/LoRA/full fine-tuning and generation on small GPUs and CPUs)."]
    if is_adapter and not is_hub_model_id(base_ref):
        public = _public_ref(base_ref)
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
    if method == "qlora" or q.get("mode") in ("4bit", "8bit"):
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
    if method == "qlora" and is_adapter:
        lines += ["", "It was trained on a 4-bit (bitsandbytes) base; it loads on a 16-bit base too (best quality), or on a "
                  "4-bit one (`quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\")`) to "
                  "save memory."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Staging: the folder that is uploaded
# --------------------------------------------------------------------------------------------------


def _clean_paths(value: Any, roots: tuple[str, ...]) -> Any:
    """Replace strings that are local paths (under one of `roots`, or absolute) with their last part."""
    if isinstance(value, dict):
        return {k: _clean_paths(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_paths(v, roots) for v in value]
    if isinstance(value, str) and (any(r in value for r in roots) or (os.path.isabs(value) and len(value) > 1 and os.sep in value[1:])):
        return Path(value).name
    return value


def _stage(run_dir: Path, source: Path, card: str, staging: Path) -> None:
    cfg = _read_config(run_dir)
    base_public = _public_ref(str(cfg.get("base_model") or ""))
    roots = tuple({str(run_dir.parent), str(run_dir.parent.resolve())})
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if any(part.startswith(".") for part in rel.parts) or rel.as_posix() == "README.md" or not path.is_file():
            continue  # temp names of atomic writes; peft's template README (it holds local paths) is replaced below
        dest = staging / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.name in _JSON_TO_CLEAN and path.stat().st_size < 5_000_000:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                data = None
            if data is not None:
                if path.name == "adapter_config.json" and isinstance(data, dict):
                    # What AutoPeftModel reads to find the base: a Hub id when there is one, else the Lab's reference.
                    data["base_model_name_or_path"] = base_public
                if path.name == "merge_info.json" and isinstance(data, dict):
                    data["base_model"] = base_public
                    data["adapter"] = f"run {run_dir.name}: adapter/"
                dest.write_text(json.dumps(_clean_paths(data, roots), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
                continue
        try:
            os.symlink(path.resolve(), dest)  # upload_folder follows symlinks: no copy of multi-GB weights
        except OSError:
            shutil.copy2(path, dest)
    (staging / "README.md").write_text(card, encoding="utf-8")
    # Last guard before anything leaves the machine: no text file may still name the runs folder.
    for path in staging.rglob("*"):
        if path.is_file() and path.suffix in _TEXT_SUFFIXES and path.name not in _NOT_SCANNED and path.stat().st_size < 5_000_000:
            text = path.read_text(encoding="utf-8", errors="replace")
            if any(r in text for r in roots):
                raise HubError(f"{path.name} of run {run_dir.name!r} contains a local path of this machine; it was not pushed.")


# --------------------------------------------------------------------------------------------------
# Push
# --------------------------------------------------------------------------------------------------


def _hf_api(token: str) -> Any:
    """The Hub client (one place, so that tests can replace it with a fake)."""
    from huggingface_hub import HfApi

    return HfApi(token=token, library_name="compact-llm-lab")


def scrub(text: str, token: str | None) -> str:
    """`text` without the token (and without anything that looks like a Hub token)."""
    if token:
        text = text.replace(token, "***")
    return _TOKEN_RE.sub("hf_***", text)


def _hub_failure(exc: BaseException, token: str, repo_id: str) -> HubError:
    """One message a person can act on, for each way a push fails; the token never appears in it."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    detail = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, token)[:300]
    owner = repo_id.split("/")[0]
    if isinstance(exc, OfflineModeIsEnabled):
        return HubError("Offline mode is on (HF_HUB_OFFLINE=1): the Hub cannot be reached, nothing was pushed. "
                        "Unset HF_HUB_OFFLINE on a machine with internet access and push again.")
    if isinstance(exc, HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return HubError("The Hugging Face token was refused (invalid, expired or revoked): create a new one with "
                            f"write permission at {HUB_URL}/settings/tokens. Nothing was pushed. (Hub: {detail})")
        if status == 403 or isinstance(exc, RepositoryNotFoundError):
            return HubError(f"The token is invalid or lacks write permission for {owner!r}: use a token with the 'write' "
                            f"role (or a fine-grained token allowed to write to {owner}'s repos) and check that {repo_id} "
                            f"is yours or your organization's. Nothing was pushed. (Hub: {detail})")
        if status == 429:
            return HubError("The Hub is rate-limiting requests: wait a few minutes and push again.")
        return HubError(f"The Hub refused the push of {repo_id} (HTTP {status}): {detail}")
    if isinstance(exc, (httpx2.TransportError, ConnectionError, TimeoutError)):
        return HubError(f"Could not reach the Hugging Face Hub (no internet, a proxy or a timeout): {detail}. Nothing was "
                        "pushed, or the push was interrupted: pushing again resumes it.")
    return HubError(f"The push of {repo_id} failed: {type(exc).__name__}: {detail}")


def push_run(
    run_dir: Path,
    repo_id: str,
    *,
    what: PushWhat | None = None,
    token: str | None = None,
    private: bool = True,
    merge: bool = False,
    license: str | None = None,
    use_env_token: bool = True,
    runs_dir: Path | None = None,
) -> str:
    """Push a finished run to the Hub repo `owner/name` (created when missing); returns the repo's URL.

    what: adapter (LoRA/QLoRA runs), merged (their merged 16-bit copy) or model (full/scratch runs);
    None = the run's own output. merge: for what=merged, merge the adapter first when there is no
    (up-to-date) merged copy. private: visibility of a *new* repo (an existing one keeps its own).
    token: else $HF_TOKEN when use_env_token. The repo ends up holding exactly the pushed folder plus its
    model card: files of an earlier push that are not in it are deleted in the same commit (the Hub keeps
    them in the history), so an adapter pushed over a merged model (or the reverse) cannot leave a repo
    that loads as the wrong thing. Raises ConfigError/HubError, before any network call for every
    mistake that can be seen locally.
    """
    run_dir = Path(run_dir)
    repo = check_repo_id(repo_id)
    if license is not None and license.strip() and not re.match(r"^[a-z0-9][a-z0-9.+-]{0,63}$", license.strip()):
        raise ConfigError("license", license, "a Hub license id such as apache-2.0, mit or llama3.1 (empty = unknown, omitted)")
    try:
        what, source = push_source(run_dir, what)
        needs_merge = False
    except HubError:
        if not (merge and what == "merged" and (run_dir / "adapter" / "adapter_config.json").exists()):
            raise
        push_source(run_dir, "adapter")  # the run itself must be a finished adapter run
        needs_merge, source = True, run_dir / "merged"
    token = resolve_token(token, use_env=use_env_token)
    if hub_offline():
        raise HubError("Offline mode is on (HF_HUB_OFFLINE=1): the Hub cannot be reached, nothing was pushed. "
                       "Unset HF_HUB_OFFLINE on a machine with internet access and push again.")
    if needs_merge:
        from .merge import merge_adapter

        source = merge_adapter(run_dir, runs_dir=runs_dir)
    card = model_card(run_dir, what, repo, license=(license or "").strip() or None)

    staging = Path(tempfile.mkdtemp(prefix="compact-push-"))
    try:
        _stage(run_dir, source, card, staging)
        api = _hf_api(token)
        try:
            url = api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
            api.upload_folder(repo_id=repo, folder_path=str(staging), repo_type="model", delete_patterns="*",
                              commit_message=f"Upload the {what} of Compact LLM Lab run {run_dir.name}")
        except Exception as exc:  # noqa: BLE001 - every Hub failure becomes one HubError without the token
            raise _hub_failure(exc, token, repo) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    url = str(url or f"{HUB_URL}/{repo}")
    from ..runs import EventLog

    try:  # a record in the run's history of where it went ("where is my model?"); never the token
        EventLog(run_dir / "events.jsonl").write("push", repo=repo, url=url, what=what, private=private)
    except OSError as exc:  # the push itself succeeded: a read-only run folder must not turn it into an error
        log.warning("pushed, but could not record the push in %s: %s", run_dir.name, exc)
    log.info("pushed the %s of run %s to %s", what, run_dir.name, url)
    return url
