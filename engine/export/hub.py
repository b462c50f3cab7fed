"""Push a finished run to the Hugging Face Hub: its LoRA adapter, its merged model, or its full model, with a
model card written from the run's config.yaml and events.jsonl (engine/export/card.py).

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

from ..errors import ConfigError, HubError, Phrase
from .card import HUB_URL, model_card, public_ref, read_run_config, run_events

log = logging.getLogger(__name__)

PushWhat = Literal["adapter", "merged", "model"]
PUSH_WHATS: tuple[str, ...] = ("adapter", "merged", "model")

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
    if repo.startswith(HUB_URL + "/"):  # a pasted address is fine
        repo = repo[len(HUB_URL) + 1:].strip("/")
    if repo.count("/") != 1:
        raise ConfigError("repo_id", repo_id, allowed_key="error.hub_fields.repo_id")
    try:
        validate_repo_id(repo)
    except HFValidationError:
        raise ConfigError("repo_id", repo_id, allowed_key="error.hub_fields.repo_id") from None
    return repo


def resolve_token(token: str | None = None, *, use_env: bool = True) -> str:
    """The token to push with: `token`, else `$HF_TOKEN` when use_env. HubError when there is none."""
    value = (token or "").strip()
    if not value and use_env:
        value = os.environ.get("HF_TOKEN", "").strip()
    if not value:
        raise HubError(key="error.push.no_token_env" if use_env else "error.push.no_token_field", url=f"{HUB_URL}/settings/tokens")
    if any(c.isspace() for c in value) or not value.isprintable():
        raise HubError(key="error.push.token_chars", url=f"{HUB_URL}/settings/tokens")
    return value


def hub_offline() -> bool:
    """huggingface_hub's offline switch, read now (its own constant is read once at import)."""
    from huggingface_hub.constants import _is_true

    return bool(_is_true(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")))


def push_source(run_dir: Path, what: str | None = None) -> tuple[str, Path]:
    """(what, folder) a push of this run would upload; HubError/ConfigError naming what is missing.

    what=None picks the run's own output: its adapter for LoRA/QLoRA runs, its model for full/scratch runs.
    """
    run_dir = Path(run_dir)
    name = run_dir.name
    if not (run_dir / "config.yaml").exists() and not (run_dir / "events.jsonl").exists():
        raise HubError(key="error.push.no_run", run=name)
    summary, _ = run_events(run_dir)
    if summary.state != "finished":
        raise HubError(key="error.push.unfinished_resumable" if summary.resumable or summary.restartable else "error.push.unfinished", run=name,
                       state=Phrase(f"finetune.state.{summary.state}"))
    has_adapter = (run_dir / "adapter" / "adapter_config.json").exists()
    has_model = (run_dir / "model" / "config.json").exists()
    if what is None or what == "":
        what = "adapter" if has_adapter else "model"
    if what not in PUSH_WHATS:
        raise ConfigError("what", what, allowed_key="error.hub_fields.what")
    if what == "adapter":
        if has_model:
            raise HubError(key="error.push.full_no_adapter", run=name)
        if not has_adapter:
            raise HubError(key="error.push.no_adapter_folder", run=name)
        return what, run_dir / "adapter"
    if what == "merged":
        if has_model:
            raise HubError(key="error.push.full_no_merge", run=name)
        if not has_adapter:
            raise HubError(key="error.push.no_adapter_no_merge", run=name)
        merged = run_dir / "merged"
        if not (merged / "config.json").exists():
            raise HubError(key="error.push.not_merged", run=name)
        if _newest_mtime(run_dir / "adapter") > _newest_mtime(merged):
            raise HubError(key="error.push.merge_stale", run=name)
        return what, merged
    if has_adapter and not has_model:
        raise HubError(key="error.push.adapter_not_model", run=name)
    if not has_model:
        raise HubError(key="error.push.no_model_folder", run=name)
    return what, run_dir / "model"


def _newest_mtime(folder: Path) -> float:
    return max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=0.0)


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
    cfg = read_run_config(run_dir)
    base_public = public_ref(str(cfg.get("base_model") or ""))
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
                raise HubError(key="error.push.local_path", file=path.name, run=run_dir.name)


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
        return HubError(key="error.push.offline")
    if isinstance(exc, HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return HubError(key="error.push.refused", url=f"{HUB_URL}/settings/tokens", detail=detail)
        if status == 403 or isinstance(exc, RepositoryNotFoundError):
            return HubError(key="error.push.forbidden", owner=owner, repo=repo_id, detail=detail)
        if status == 429:
            return HubError(key="error.push.rate_limited")
        return HubError(key="error.push.http", repo=repo_id, status=str(status), detail=detail)
    if isinstance(exc, (httpx2.TransportError, ConnectionError, TimeoutError)):
        return HubError(key="error.push.unreachable", detail=detail)
    return HubError(key="error.push.failed", repo=repo_id, kind=type(exc).__name__, detail=detail)


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
    gguf: str | None = None,
    gguf_preset: str | None = None,
) -> str:
    """Push a finished run to the Hub repo `owner/name` (created when missing); returns the repo's URL.

    what: adapter (LoRA/QLoRA runs), merged (their merged 16-bit copy) or model (full/scratch runs);
    None = the run's own output. merge: for what=merged, merge the adapter first when there is no
    (up-to-date) merged copy. private: visibility of a *new* repo (an existing one keeps its own).
    token: else $HF_TOKEN when use_env_token. The repo ends up holding exactly the pushed folder plus its
    model card: files of an earlier push that are not in it are deleted in the same commit (the Hub keeps
    them in the history), so an adapter pushed over a merged model (or the reverse) cannot leave a repo
    that loads as the wrong thing. gguf: also upload a GGUF of the pushed model (f16, q8_0 or q4_0) and its Ollama
    Modelfile (engine/export/gguf.py), for what = merged or model; gguf_preset: the Modelfile's decoding preset (None:
    GgufSettings' default; the page passes the one its Playground uses for the run). Raises ConfigError/HubError, before any network call
    for every mistake that can be seen locally.
    """
    run_dir = Path(run_dir)
    repo = check_repo_id(repo_id)
    if license is not None and license.strip() and not re.match(r"^[a-z0-9][a-z0-9.+-]{0,63}$", license.strip()):
        raise ConfigError("license", license, allowed_key="error.hub_fields.license")
    try:
        what, source = push_source(run_dir, what)
        needs_merge = False
    except HubError:
        if not (merge and what == "merged" and (run_dir / "adapter" / "adapter_config.json").exists()):
            raise
        push_source(run_dir, "adapter")  # the run itself must be a finished adapter run
        needs_merge, source = True, run_dir / "merged"
    if gguf:
        from ..config import GgufSettings

        # ConfigError naming the field for a wrong type or preset
        gguf_settings = GgufSettings(type=gguf, **({"preset": gguf_preset} if gguf_preset else {}))
        if what == "adapter":
            raise ConfigError("gguf", gguf, allowed_key="error.hub_fields.gguf_adapter")
    token = resolve_token(token, use_env=use_env_token)
    if hub_offline():
        raise HubError(key="error.push.offline")
    if needs_merge:
        from .merge import merge_adapter

        source = merge_adapter(run_dir, runs_dir=runs_dir)
    exported = None
    if gguf:
        from .gguf_run import export_ref_gguf

        exported = export_ref_gguf(run_dir.name, Path(runs_dir) if runs_dir else run_dir.parent, gguf_settings)
    card = model_card(run_dir, what, repo, license=(license or "").strip() or None, gguf_file=exported.gguf_path.name if exported else None)

    staging = Path(tempfile.mkdtemp(prefix="compact-push-"))
    try:
        _stage(run_dir, source, card, staging)
        if exported is not None:  # the .gguf (symlinked, like the weights) and its Modelfile beside the model
            for path in (exported.gguf_path, exported.modelfile):
                try:
                    os.symlink(path.resolve(), staging / path.name)
                except OSError:
                    shutil.copy2(path, staging / path.name)
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
