"""Shared mode: the one policy that decides what a visitor of a public app may do, decided once at start.

An app is *shared* when people other than the one who started it can reach it. `decide` lists every way that can
happen (docs/security.md has the same list):

- an explicit `--share` (a public gradio.live link);
- gradio's own rules for `launch(share=None)` (gradio/blocks.py `Blocks.launch`): a Colab notebook, a hosted notebook
  (gradio/utils.py `is_hosted_notebook`: Kaggle's ``KAGGLE_KERNEL_RUN_TYPE``, SageMaker's ``/home/ec2-user/SageMaker``)
  and ``GRADIO_SHARE=true`` all turn the public link on by themselves;
- a Hugging Face Space (``SPACE_ID``: the Space's own address is public);
- a bind address other than loopback (``--host 0.0.0.0``, ``GRADIO_SERVER_NAME``);
- ``COMPACT_LAB_SHARED=1`` (forced, e.g. by tests or an owner who wants the restrictions anyway).

The decision also carries the exact `share` value to pass to `launch()` (`Decision.share`), so gradio never applies
its own rules on top and the app and gradio can never disagree about a public link; and whether the app itself makes
that link (`Decision.public_link`), where a login is on by default (`default_login`). The app decides this once at
start (`decide`) and records it in the environment as
``COMPACT_LAB_SHARED=1`` (`activate`), so that every part of the engine, the training subprocesses included, reads
the same answer (`is_shared`) without a flag threaded through every call. Tests set the variable to force shared
mode without a network.

In shared mode:

- ``trust_remote_code`` and model folders on the server's disk are refused with a message naming the field
  (`check_remote_code`, `check_local_model`): a Hub repo's Python would otherwise run inside the server;
- the server's Hugging Face token never serves a visitor's load (`hub_token` is False: huggingface_hub then
  ignores ``HF_TOKEN`` and the stored login) and is removed from the environment of training subprocesses, which also
  get ``HF_HUB_DISABLE_IMPLICIT_TOKEN=1`` (`child_env`), unless the owner opts in with ``--share-owner-token`` (``COMPACT_LAB_SHARE_OWNER_TOKEN=1``), which
  lets every visitor read the owner's private and gated repositories (docs/security.md);
- a Hub model the playground would download is first sized from its file listing against a cap
  (`max_model_gib`, ``COMPACT_LAB_MAX_MODEL_GIB``, default half the host's memory).

Whatever the mode, a training subprocess gets an environment built from an allow-list (`child_env`): the variables
Python, PyTorch, CUDA and the Hugging Face libraries read, nothing else, so the app's login (``COMPACT_LAB_AUTH``) and
any other secret of the server's environment (cloud keys, API tokens) never reach a process that runs a visitor's job.

This module sits at the bottom of the engine beside refs: it imports `errors` only.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, EngineError

SHARED_ENV = "COMPACT_LAB_SHARED"
OWNER_TOKEN_ENV = "COMPACT_LAB_SHARE_OWNER_TOKEN"
MAX_MODEL_ENV = "COMPACT_LAB_MAX_MODEL_GIB"
# Every variable huggingface_hub reads a token from (a child process in shared mode gets none of them).
TOKEN_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")
AUTH_ENV = "COMPACT_LAB_AUTH"  # the app's login, USER:PASSWORD (a Space secret): never in a child's environment
# gradio/utils.py `is_hosted_notebook`: a SageMaker notebook instance is recognised by this folder
SAGEMAKER_DIR = Path("/home/ec2-user/SageMaker")

# The environment of a training subprocess, by allow-list (`child_env`): exact names, then prefixes. Everything
# Python, PyTorch/CUDA, the BLAS threads, the Hugging Face libraries and this app read; no credentials of any kind.
CHILD_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "TEMP", "TMP", "PWD",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE",
    "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
    "TOKENIZERS_PARALLELISM", "SAFETENSORS_FAST_GPU", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "COVERAGE_PROCESS_START",
})
CHILD_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "CUBLAS_", "CUDNN_", "TORCH", "PYTORCH_", "OMP_", "KMP_", "MKL_",
                      "OPENBLAS_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "ACCELERATE_", "BNB_", "BITSANDBYTES_", "TRITON_",
                      "COMPACT_LAB_", "COV_CORE_")
# never passed on, whatever the prefix rules say (the app's login; the Hub tokens are handled by `child_env`)
CHILD_ENV_DENIED = frozenset({AUTH_ENV})


@dataclass(frozen=True)
class Decision:
    """Whether the app is shared, and the reasons (printed at start so the owner knows why); `share`: the value to pass
    to gradio's ``launch(share=...)`` (never None: gradio's own rules must not decide on top of this one); `public_link`:
    the app itself opens a public gradio.live link (explicit --share, Colab, a hosted notebook, GRADIO_SHARE), where a
    login is on by default (`default_login`)."""

    shared: bool
    reasons: tuple[str, ...]
    share: bool = False
    public_link: bool = False


def on_colab() -> bool:
    """Running in a Google Colab runtime (its module is importable, or its environment variables are set)."""
    if any(k.startswith("COLAB_") for k in os.environ):
        return True
    try:
        return importlib.util.find_spec("google.colab") is not None
    except (ImportError, ValueError):
        return False


def hosted_notebook(env: Mapping[str, str] | None = None, sagemaker_dir: Path = SAGEMAKER_DIR) -> str | None:
    """The hosted notebook gradio recognises (gradio/utils.py `is_hosted_notebook`), where `launch(share=None)` opens a
    public link by itself: "Kaggle" (``KAGGLE_KERNEL_RUN_TYPE``), "SageMaker" (its notebook folder), else None."""
    env = os.environ if env is None else env
    if env.get("KAGGLE_KERNEL_RUN_TYPE"):
        return "Kaggle"
    if os.path.exists(sagemaker_dir):
        return "SageMaker"
    return None


def gradio_share_env(env: Mapping[str, str] | None = None) -> bool:
    """``GRADIO_SHARE=true``: gradio's `launch(share=None)` then opens a public link (gradio/blocks.py, `.lower() == "true"`)."""
    env = os.environ if env is None else env
    return (env.get("GRADIO_SHARE") or "").strip().lower() == "true"


def is_loopback(host: str | None) -> bool:
    """True for a bind address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    host = (host or "127.0.0.1").strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to any interface


def decide(*, share: bool | None, host: str | None, env: Mapping[str, str] | None = None, colab: bool | None = None,
           sagemaker_dir: Path = SAGEMAKER_DIR) -> Decision:
    """Is this app shared, and which `share` goes to `launch()`? Every way the app can be reached by others (the module
    docstring). share: the --share flag (True), --no-share (False: no public link even where gradio would open one), or
    None (not given: gradio's own rules, reproduced here, decide as they would)."""
    env = os.environ if env is None else env
    reasons = []
    colab = on_colab() if colab is None else colab
    notebook = hosted_notebook(env, sagemaker_dir)
    if share:
        reasons.append("--share (a public gradio.live link)")
    elif share is None:  # gradio/blocks.py Blocks.launch with share=None: hosted notebooks first, then GRADIO_SHARE
        if colab:
            reasons.append("Colab (gradio opens a public link there)")
        elif notebook:
            reasons.append(f"a {notebook} notebook (gradio opens a public link there)")
        elif gradio_share_env(env):
            reasons.append("GRADIO_SHARE=true (gradio opens a public link)")
    link = bool(reasons)
    if env.get("SPACE_ID"):
        reasons.append(f"a Hugging Face Space ({env['SPACE_ID']})")
        link = False  # gradio refuses share=True on a Space (the Space's own address is the public one)
    elif colab and not link:
        reasons.append("Colab (reachable through Colab's own proxy to the notebook's ports)")
    if not is_loopback(host):
        reasons.append(f"bound to {host} (reachable from other machines)")
    if env.get(SHARED_ENV) == "1":
        reasons.append(f"{SHARED_ENV}=1")
    return Decision(bool(reasons), tuple(reasons), share=link, public_link=link)


def no_share_overrides(*, share: bool | None, env: Mapping[str, str] | None = None, colab: bool | None = None,
                       sagemaker_dir: Path = SAGEMAKER_DIR) -> list[str]:
    """What --no-share (share=False) turned off: the ways gradio would have opened a public link by itself here (Colab,
    a hosted notebook, GRADIO_SHARE=true), so that the app can say so at start. Empty without --no-share."""
    if share is not False:
        return []
    env = os.environ if env is None else env
    colab = on_colab() if colab is None else colab
    notebook = hosted_notebook(env, sagemaker_dir)
    return [why for why, on in (("Colab", colab), (f"a {notebook} notebook", bool(notebook)),
                                (f"GRADIO_SHARE={env.get('GRADIO_SHARE', '').strip()}", gradio_share_env(env))) if on]


def default_login(decision: Decision) -> bool:
    """Is a login on by default (a password generated at start, unless the owner gave one or --no-auth)? Wherever the
    app itself opens a public link (`Decision.public_link`): anyone who gets the gradio.live address could use it."""
    return decision.public_link


def generated_password() -> str:
    """A new random password for `default_login` (about 72 bits)."""
    return secrets.token_urlsafe(9)


# Why `--mcp` cannot be combined with a login (gradio 6.31, read in its source): gradio/mcp.py
# `GradioMCPServer.launch_mcp_on_sse` mounts /gradio_api/mcp as its own Starlette app, outside the login checks of
# gradio/routes.py (`login_check`), so the tool list and schema answer without a login; and a queued tool call goes
# through `_get_or_create_client`, a gradio_client.Client made without credentials, which the login then refuses
# (its /config answers 401), so no call works even for a logged-in assistant.
MCP_LOGIN_REFUSAL = (f"--mcp cannot be used with a login (--auth, {AUTH_ENV}, or the one generated for a public link): gradio's MCP "
                     "server does not check the login (gradio/mcp.py GradioMCPServer.launch_mcp_on_sse mounts /gradio_api/mcp "
                     "outside gradio/routes.py's login_check) and calls the tools through an internal gradio_client.Client "
                     "that carries no credentials (GradioMCPServer._get_or_create_client), so the tools would be open to "
                     "anyone and still fail for a logged-in assistant. Start without --mcp, or with --no-auth where anyone who "
                     "can reach the app may use it.")


def check_mcp_login(mcp: bool, auth: object) -> None:
    """Refuse --mcp together with a login (see MCP_LOGIN_REFUSAL): an EngineError naming the gradio code that decides."""
    if mcp and auth:
        raise EngineError(MCP_LOGIN_REFUSAL)


def activate(shared: bool, *, owner_token: bool = False) -> None:
    """Record the decision for this process and its children (called once by the app at start)."""
    os.environ[SHARED_ENV] = "1" if shared else "0"
    os.environ[OWNER_TOKEN_ENV] = "1" if shared and owner_token else "0"


def is_shared() -> bool:
    """Shared mode is on (see the module docstring)."""
    return os.environ.get(SHARED_ENV) == "1"


def owner_token_allowed() -> bool:
    """The owner explicitly lets visitors' loads use the server's Hugging Face token (--share-owner-token)."""
    return os.environ.get(OWNER_TOKEN_ENV) == "1"


def hub_token() -> bool | None:
    """The `token=` argument for every Hub call made for a visitor: False in shared mode (huggingface_hub then reads
    neither HF_TOKEN nor the stored login), None (the library's default lookup) otherwise or with the owner's opt-in."""
    return False if is_shared() and not owner_token_allowed() else None


def token_kwargs() -> dict[str, bool]:
    """`{"token": False}` when visitors' loads must not use the server's token, else {} (the libraries' defaults)."""
    token = hub_token()
    return {} if token is None else {"token": token}


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a training (or merge) subprocess, built from an allow-list (CHILD_ENV_NAMES and
    CHILD_ENV_PREFIXES, never CHILD_ENV_DENIED): no login, no cloud or API keys. It records the sharing decision, so the
    child applies the same policy (`is_shared`, `hub_token`); in shared mode without the owner's opt-in it also holds no
    Hub token and tells huggingface_hub never to send the stored login (HF_HUB_DISABLE_IMPLICIT_TOKEN)."""
    out = {k: v for k, v in env.items()
           if k not in CHILD_ENV_DENIED and (k in CHILD_ENV_NAMES or k.startswith(CHILD_ENV_PREFIXES))}
    out[SHARED_ENV] = "1" if is_shared() else "0"
    out[OWNER_TOKEN_ENV] = "1" if owner_token_allowed() else "0"
    if hub_token() is False:
        for key in TOKEN_ENV_VARS:
            out.pop(key, None)
        out["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    return out


def check_remote_code(value: object, field: str = "trust_remote_code") -> None:
    """Refuse `trust_remote_code` on a shared app (it would run a Hub repo's Python on this server)."""
    if value and is_shared():
        raise ConfigError(field, value, allowed_key="error.allowed.remote_code_shared")


def check_local_model(ref: str, field: str = "model") -> None:
    """Refuse a model folder on the server's disk on a shared app."""
    if is_shared():
        raise ConfigError(field, ref, allowed_key="error.allowed.no_folders_shared")


def max_model_gib() -> float:
    """The largest Hub model (GiB of weight files) the playground downloads on a shared app: COMPACT_LAB_MAX_MODEL_GIB,
    else half of the host's memory (a larger download could not be loaded anyway, and would fill the disk)."""
    raw = os.environ.get(MAX_MODEL_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(MAX_MODEL_ENV, raw, "a number of GiB, e.g. 8") from None
        if value > 0:
            return value
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        total = 16.0
    return max(1.0, total / 2)
