"""One gate for what may be done with a run: who may read its files and what is derived from them, on a shared app.

Every entry that hands out a run's files or something made from them (the zip, a GGUF, an ONNX file, a merge, a push
to the Hub, a new run trained from it) or that changes the run (stop, resume, retry, delete) asks `check_run_access`,
and so does every entry that only uses a run the way the playground does (generate, compare, batch, evaluate, inspect
its data, estimate its memory), with its own action: one function, so that the next export cannot forget the check
(tests/app/test_run_access.py enumerates the app's endpoints and fails for one that takes a run reference without
asking). The actions and who may do them are in `ACTIONS` (docs/security.md has the same table):

- anyone who can use the app may *use* any finished run as a model: try it in the playground, compare it, batch or
  evaluate with it, distil from it as a teacher, inspect data or estimate memory with it as the base;
- only its *owner* (the browser or API session that started it, engine/training/jobs.py) may take its files or what
  is derived from them away, or act on it: the owner-only actions.

Off a shared app (engine/sharing.py) everyone who can reach the app owns every run, and the CLI runs as the machine's
owner: nothing is refused (`owner_only` False). On a shared app a run started without an owner key (the CLI, before
the app) belongs to nobody a visitor can prove to be, so its owner-only actions are refused to everyone.

Callers name the run as a model reference (``run:NAME``, ``run:NAME/merged``) or by its plain name (the run picker);
anything else (a built-in model, a Hub id) is no run and passes. This module sits beside runs.py: it imports `errors`,
`refs`, `runs` and `sharing` only.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import JobError
from .refs import MERGED_SUFFIX, RUN_PREFIX
from .runs import run_path
from .sharing import is_shared

OWNER_FILE = "owner"  # <run>/owner: the sha256 of the owner key that started it (never the key itself)

# action -> True when only the run's owner may do it on a shared app (False: any visitor may). The refusal's words are
# message.jobs.not_yours.<action> (presets/lang/*.yaml).
ACTIONS: dict[str, bool] = {
    # act on the run
    "stop": True, "resume": True, "retry": True, "delete": True,
    # take its files, or what is made from them, away from the app
    "download": True, "export": True, "onnx": True, "merge": True, "push": True, "tensorboard": True,
    # train a new run from its weights (the new run's zip would hand the weights out)
    "train_from": True,
    # use it as a model inside the app, as the playground does
    "try": False, "compare": False, "batch": False, "evaluate": False, "teacher": False, "inspect": False,
    "estimate": False, "watch": False,
}


def owner_hash(owner: str) -> str:
    """What is kept of an owner key in the run folder: its sha256 (a zipped or shared run does not give the key away)."""
    return hashlib.sha256(owner.encode("utf-8")).hexdigest()


def run_name_of(ref: str | None, *, plain: bool = False) -> str | None:
    """The run a reference names: NAME of ``run:NAME`` or ``run:NAME/merged``; with `plain`, a bare NAME (the run
    picker's value) too. None for anything that is not a run (a built-in model, a Hub id, nothing)."""
    ref = str(ref or "").strip()
    if ref.startswith(RUN_PREFIX):
        name = ref[len(RUN_PREFIX):]
        return name[: -len(MERGED_SUFFIX)] if name.endswith(MERGED_SUFFIX) else name
    return ref if plain and ref else None


def recorded_owner(runs_dir: Path, name: str) -> str | None:
    """The hash of the key that started run `name` (its owner file), None for a run started without one."""
    try:
        return (run_path(runs_dir, name) / OWNER_FILE).read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def is_owner(runs_dir: Path, name: str, owner: str | None) -> bool:
    """Does the holder of `owner` own run `name` (its owner file holds the hash of that key)?"""
    recorded = recorded_owner(runs_dir, name)  # None: started without an owner key (the CLI), nobody a visitor can prove to be
    return bool(owner and recorded) and owner_hash(owner) == recorded


def may_access(runs_dir: Path, name: str, owner: str | None, action: str, *, owner_only: bool | None = None) -> bool:
    """May the holder of `owner` do `action` (a key of ACTIONS) with run `name`? `owner_only`: whether ownership counts
    at all (default: the app is shared)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown run action {action!r}: add it to engine/run_access.py ACTIONS")
    folder = run_path(runs_dir, name)  # a name that could leave the runs folder is refused whatever the action
    if not ACTIONS[action] or not folder.is_dir():  # no such run: nothing to hand out (its own message comes next)
        return True
    if not (is_shared() if owner_only is None else owner_only):
        return True
    return is_owner(runs_dir, name, owner)


def check_run_access(runs_dir: Path, ref: str | None, owner: str | None, action: str, *, plain: bool = False,
                     owner_only: bool | None = None) -> None:
    """The gate: raise JobError (message.jobs.not_yours.<action>, in the visitor's language) unless the holder of
    `owner` may do `action` with the run `ref` names (see the module docstring); nothing for a reference that names no
    run. plain: `ref` may be a bare run name (a run picker)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown run action {action!r}: add it to engine/run_access.py ACTIONS")
    name = run_name_of(ref, plain=plain)
    if name is None:
        return
    if not may_access(runs_dir, name, owner, action, owner_only=owner_only):
        raise JobError(key=f"message.jobs.not_yours.{action}", name=name)
