"""Can a Hugging Face model be loaded right now? Answered in about a second, before any download starts.

Without a network, `from_pretrained` retries every HTTP request five times with back-off (about 48 s per model
before it gives up), and with `HF_HUB_OFFLINE=1` it still spends seconds importing before it fails. A person
clicking Generate deserves an answer at once, so the playground asks first (`check_hub_model`):

- offline mode (`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`): the model must be in the local Hugging Face cache;
- otherwise one TCP connection to the Hub's host (or to the HTTPS proxy), with a short timeout, tells whether the
  Hub is reachable; the answer is kept for a little while so that a page of models does not probe for each one;
- the Hub unreachable but the model cached: it loads from the cache with huggingface_hub's offline mode switched
  on for the duration of that load (`offline_while`), so no request is retried.

A model that cannot be loaded raises ModelLoadError with a language-file key (the page shows it in the visitor's
language). Nothing here downloads anything.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

from ..errors import ModelLoadError

PROBE_TIMEOUT_S = 1.5  # one TCP connect: a reachable Hub answers in milliseconds
PROBE_TTL_S = 30.0  # how long a probe's answer is trusted
_TRUE = ("1", "true", "yes", "on")

_lock = threading.Lock()
_probe: dict[str, float | bool | None] = {"at": None, "ok": False}
_offline_users = 0  # loads currently running with offline mode forced on (offline_while)
_offline_before = False


def offline_mode() -> bool:
    """Whether huggingface_hub runs offline: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set now or when it was imported."""
    from huggingface_hub import constants

    env = any(os.environ.get(var, "").strip().lower() in _TRUE for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return env or bool(constants.HF_HUB_OFFLINE)


def in_local_cache(repo_id: str) -> bool:
    """Whether the model's config.json is in the local Hugging Face cache (a model downloaded before)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except (ValueError, OSError):  # an id huggingface_hub refuses, an unreadable cache
        return False


def hub_address() -> tuple[str, int]:
    """(host, port) a connection to the Hub goes to first: the HTTPS proxy when one is set, else the endpoint's host."""
    from huggingface_hub import constants

    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        if os.environ.get(var):
            proxy = urlparse(os.environ[var] if "://" in os.environ[var] else f"http://{os.environ[var]}")
            if proxy.hostname:
                return proxy.hostname, proxy.port or (443 if proxy.scheme == "https" else 80)
    endpoint = urlparse(constants.ENDPOINT)
    return endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)


def can_connect(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """One TCP connection within `timeout_s`, name lookup included (it runs in a thread: a slow DNS cannot hold us)."""
    answer: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                answer.append(True)
        except OSError:
            answer.append(False)

    worker = threading.Thread(target=attempt, name="hub-probe", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return bool(answer and answer[0])


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the Hub (or the proxy in front of it) accepts a connection; remembered for PROBE_TTL_S seconds."""
    now = time.monotonic()
    with _lock:
        at = _probe["at"]
        if at is not None and now - float(at) < PROBE_TTL_S:
            return bool(_probe["ok"])
    ok = can_connect(*hub_address(), timeout_s=timeout_s)
    with _lock:
        _probe.update(at=time.monotonic(), ok=ok)
    return ok


def forget_probe() -> None:
    """Forget the last probe's answer (the next check connects again)."""
    with _lock:
        _probe.update(at=None, ok=False)


def hub_online() -> bool:
    """Whether Hub downloads can work now: not in offline mode, and the Hub (or its proxy) accepts a connection. Cheap
    to ask often: the environment is read at once and the probe's answer is remembered for PROBE_TTL_S seconds."""
    return not offline_mode() and hub_reachable()


def needs_internet(repo_id: str, online: bool | None = None) -> bool:
    """Whether loading the Hub model `repo_id` needs an internet connection this app does not have now: offline (or the
    Hub unreachable) and the model not in the local cache. `online`: hub_online()'s answer when the caller already has
    it (a list of models asks once)."""
    if online is None:
        online = hub_online()
    return not online and not in_local_cache(repo_id)


def check_hub_model(repo_id: str) -> bool:
    """Whether the Hub model `repo_id` can be loaded now; True when it must load from the local cache only (the Hub
    unreachable, the model cached). ModelLoadError (keyed) when it cannot: offline or unreachable, and not cached."""
    if offline_mode():
        if in_local_cache(repo_id):
            return False  # offline mode already keeps every library on the cache
        raise ModelLoadError(key="playground.error.hub_offline", model=repo_id)
    if hub_reachable():
        return False
    if in_local_cache(repo_id):
        return True
    host, _port = hub_address()
    raise ModelLoadError(key="playground.error.hub_unreachable", model=repo_id, host=host)


@contextmanager
def offline_while(active: bool) -> Iterator[None]:
    """huggingface_hub's (and so transformers') offline mode, switched on for the duration of one load when `active`:
    every file then comes from the cache at once instead of after five retries per request."""
    global _offline_users, _offline_before
    if not active:
        yield
        return
    from huggingface_hub import constants

    with _lock:
        if _offline_users == 0:
            _offline_before = constants.HF_HUB_OFFLINE
            constants.HF_HUB_OFFLINE = True
        _offline_users += 1
    try:
        yield
    finally:
        with _lock:
            _offline_users -= 1
            if _offline_users == 0:
                constants.HF_HUB_OFFLINE = _offline_before
