"""Shared mode: the one policy that decides what a visitor of a public app may do, decided once at start.

An app is *shared* when people other than the one who started it can reach it: a `--share` link, a notebook on
Colab (gradio turns the public link on by itself there), a Hugging Face Space, or a bind address other than
loopback. The app decides this once at start (`decide`) and records it in the environment as
``COMPACT_LAB_SHARED=1`` (`activate`), so that every part of the engine, the training subprocesses included, reads
the same answer (`is_shared`) without a flag threaded through every call. Tests set the variable to force shared
mode without a network.

In shared mode:

- ``trust_remote_code`` and model folders on the server's disk are refused with a message naming the field
  (`check_remote_code`, `check_local_model`): a Hub repo's Python would otherwise run inside the server;
- the server's Hugging Face token never serves a visitor's load (`hub_token` is False: huggingface_hub then
  ignores ``HF_TOKEN`` and the stored login) and is removed from the environment of training subprocesses
  (`child_env`), unless the owner opts in with ``--share-owner-token`` (``COMPACT_LAB_SHARE_OWNER_TOKEN=1``), which
  lets every visitor read the owner's private and gated repositories (docs/security.md);
- a Hub model the playground would download is first sized from its file listing against a cap
  (`max_model_gib`, ``COMPACT_LAB_MAX_MODEL_GIB``, default half the host's memory).

This module sits at the bottom of the engine beside refs: it imports `errors` only.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigError

SHARED_ENV = "COMPACT_LAB_SHARED"
OWNER_TOKEN_ENV = "COMPACT_LAB_SHARE_OWNER_TOKEN"
MAX_MODEL_ENV = "COMPACT_LAB_MAX_MODEL_GIB"
# Every variable huggingface_hub reads a token from (a child process in shared mode gets none of them).
TOKEN_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")


@dataclass(frozen=True)
class Decision:
    """Whether the app is shared, and the reasons (printed at start so the owner knows why)."""

    shared: bool
    reasons: tuple[str, ...]


def on_colab() -> bool:
    """Running in a Google Colab runtime (its module is importable, or its environment variables are set)."""
    if any(k.startswith("COLAB_") for k in os.environ):
        return True
    try:
        return importlib.util.find_spec("google.colab") is not None
    except (ImportError, ValueError):
        return False


def is_loopback(host: str | None) -> bool:
    """True for a bind address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    host = (host or "127.0.0.1").strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to any interface


def decide(*, share: bool, host: str | None, env: Mapping[str, str] | None = None, colab: bool | None = None) -> Decision:
    """Is this app shared? A --share link, Colab, a Space, a non-loopback bind address, or COMPACT_LAB_SHARED=1."""
    env = os.environ if env is None else env
    reasons = []
    if share:
        reasons.append("--share (a public gradio.live link)")
    if on_colab() if colab is None else colab:
        reasons.append("Colab (gradio opens a public link there)")
    if env.get("SPACE_ID"):
        reasons.append(f"a Hugging Face Space ({env['SPACE_ID']})")
    if not is_loopback(host):
        reasons.append(f"bound to {host} (reachable from other machines)")
    if env.get(SHARED_ENV) == "1":
        reasons.append(f"{SHARED_ENV}=1")
    return Decision(bool(reasons), tuple(reasons))


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
    """The environment of a training subprocess: in shared mode without the owner's opt-in, no Hub token in it."""
    out = dict(env)
    if hub_token() is False:
        for key in TOKEN_ENV_VARS:
            out.pop(key, None)
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
