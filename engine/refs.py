"""Reference grammar and path policy: how models, runs and datasets are named, in one place.

The references the app and the CLI accept:

- ``builtin:NAME``      a built-in compact model (or a built-in dataset sample)
- ``run:NAME``          a run folder ``<runs>/NAME``; ``run:NAME/merged`` its merged 16-bit model
- ``hub:owner/name``    a Hugging Face dataset (config, split and column mapping checked here too)
- ``owner/name``        a Hugging Face model id (a legacy single name such as ``gpt2`` too, where the loader takes it)

Several callers check names at different points, and their rules are not all the same: the loader caps a
run name at 100 characters, the browser boundary does not; a dataset id needs its owner, a model id may
omit it. Each distinct rule is one public name below, documented with where it applies, so the
differences are visible and none is copied.

The gate for what a visitor names (the last section): on a shared app (engine/sharing.py) a reference that a visitor
gives (a model, teacher, adapter, dataset or the estimator's config.json, from the page, its API or an MCP tool) may
name a file on the server only when it is one of that visitor's own uploads. Each entry checks its inputs with its own
words (engine/estimator/handoff.py for the page and MCP); the engine functions every entry goes through check again
(`check_visitor_path`, `check_visitor_refs`: the memory estimator's model resolution, `JobManager.start`), so an entry
that forgot cannot open a server file. The entry says whose uploads those are (`visitor_scope`: a session's folder, or
none for an MCP caller, who cannot upload). A refused path gets the same answer whether it exists or not: nothing is
looked up before the refusal. The CLI has its own policy: it runs as the machine's owner, so it is never shared.

This module sits at the bottom of the engine: it imports `errors` and `sharing` only.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path

from .errors import ConfigError, ModelLoadError
from .sharing import is_shared

BUILTIN_PREFIX = "builtin:"
RUN_PREFIX = "run:"
MERGED_SUFFIX = "/merged"  # run:NAME/merged = <runs>/NAME/merged (engine/export/merge.py merge_adapter)
HUB_PREFIX = "hub:"

# --------------------------------------------------------------------------------------------------
# Run and built-in names, the runs folder
# --------------------------------------------------------------------------------------------------

# A run or built-in name as a folder: one path component, no separators, no hidden names, at most 100
# characters. With `is_valid_run_name` (which also refuses ".."): run folders (engine/runs.py `run_path`),
# run:/builtin: references when a model is loaded (engine/models/loading.py).
RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# The NAME of builtin:NAME / run:NAME as checked where it is only passed on, not opened: from the browser
# (engine/estimator/handoff.py) and in a published model card. Same characters, no length cap (the loader
# applies RUN_NAME_RE when the model is opened).
PLAIN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# builtin:NAME or run:NAME (no /merged) with a plain NAME: the references a model card may name
# (engine/export/hub.py). ".." is not checked: the name is only printed.
NAMED_MODEL_REF_RE = re.compile(r"^(builtin|run):[A-Za-z0-9][A-Za-z0-9._-]*$")


# An upload is kept as `<20 hex digits of a keyed hash>-<its own name>` (engine/views/uploads.py keep_upload): the
# prefix keeps names unguessable and means nothing to the person who uploaded the file.
UPLOAD_NAME_RE = re.compile(r"^[0-9a-f]{20}-(?=.)")


def shown_file_name(path: str | Path) -> str:
    """The name of a file as its owner knows it: an upload's name without the hash prefix it is kept under."""
    return UPLOAD_NAME_RE.sub("", Path(path).name)


def is_valid_run_name(name: str) -> bool:
    """True when `name` can be a run (or built-in model) folder: RUN_NAME_RE and no ".."."""
    return bool(RUN_NAME_RE.match(name or "")) and ".." not in name


def is_plain_name(name: str) -> bool:
    """True when `name` is a plain builtin:/run: name as accepted from the browser: PLAIN_NAME_RE and no ".."."""
    return bool(PLAIN_NAME_RE.match(name)) and ".." not in name


def is_folder_safe_name(name: str) -> bool:
    """The rule for the `run_name` a user types into a TrainConfig: letters (any script), digits, '-', '_' and
    '.', not starting with '.' (it becomes a folder name). Looser than RUN_NAME_RE; the run folder itself is
    opened with `is_valid_run_name`."""
    return all(c.isalnum() or c in "-_." for c in name) and not name.startswith(".")


# A Hugging Face Space's persistent storage, when the owner adds it: the only folder of a Space that outlives a restart.
SPACE_DATA_DIR = Path("/data")


def default_runs_dir() -> Path:
    """The runs directory, created if missing: $COMPACT_LAB_RUNS; on a Space with persistent storage (/data exists and
    is writable) /data/runs, since everything else on a Space disappears at a restart; else ./runs."""
    chosen = os.environ.get("COMPACT_LAB_RUNS")
    if not chosen and os.environ.get("SPACE_ID") and SPACE_DATA_DIR.is_dir() and os.access(SPACE_DATA_DIR, os.W_OK | os.X_OK):
        chosen = str(SPACE_DATA_DIR / "runs")
    path = Path(chosen or "runs").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_ref_dir(name: str, runs_dir: Path) -> Path:
    """The folder of the run named by a run:NAME model reference; `ModelLoadError` for a name that could
    escape the runs directory."""
    if not is_valid_run_name(name):
        raise ModelLoadError(key="error.model.run_name", name=name)
    return runs_dir / name


def path_exists(path: Path) -> bool:
    """`path.exists()`, False instead of an error for a path the filesystem cannot even look up."""
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the filesystem, an embedded NUL byte...
        return False


def is_within(path: Path, root: Path) -> bool:
    """True when `path` (symlinks resolved) lies inside `root`: the containment check for user-given paths."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------
# Hugging Face model ids
# --------------------------------------------------------------------------------------------------

# A Hub model id: "owner/name" or a legacy canonical single name ("gpt2"); the Hub's own character rules,
# at most 96 characters per part. The loader (engine/models/loading.py) and the browser boundary
# (engine/estimator/handoff.py) use it, both also refusing "..".
HUB_MODEL_ID_RE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# "owner/name" with the owner required: Hub datasets (`check_hub_ref`) and the Hub models a model card links
# to (engine/export/hub.py `is_hub_model_id`).
HUB_OWNER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# Anything shaped like owner/name, loosely (any word characters, no length cap): the memory estimator's last
# guess before it asks the Hub for a config.json (engine/estimator/architecture.py); the Hub rejects the rest.
LOOSE_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")

# --------------------------------------------------------------------------------------------------
# Hub datasets: hub:owner/name, config, split, column mapping (checked by TrainConfig and engine/data)
# --------------------------------------------------------------------------------------------------

_SLICE = r"(\[[-0-9%:. ]*\])?"
SPLIT_RE = re.compile(rf"^[A-Za-z0-9_.-]+{_SLICE}(\+[A-Za-z0-9_.-]+{_SLICE})*$")
CONFIG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")

# mapping target -> the format it belongs to (an engine.data.formats Format; the targets of one mapping
# must belong to one format)
COLUMN_TARGETS: dict[str, str] = {
    "text": "text",
    "instruction": "instruction",
    "input": "instruction",
    "output": "instruction",
    "response": "instruction",
    "system": "instruction",
    "prompt": "prompt_completion",
    "completion": "prompt_completion",
    "messages": "chat",
    "conversations": "chat",
    # preference pairs (DPO, ORPO): 'prompt' joins them too, see `mapping_format`
    "chosen": "preference",
    "rejected": "preference",
    # labelled completions (KTO): 'prompt' and 'completion' join 'label'; 'system' joins any chat-like format
    "label": "unpaired",
}
SHARED_TARGETS = ("system",)  # a target every chat-like format reads: alone it leaves the format to detection


def is_hub_ref(ref: str) -> bool:
    """True for a ``hub:owner/name`` dataset reference."""
    return str(ref or "").strip().startswith(HUB_PREFIX)


def check_hub_ref(ref: str, field: str = "dataset") -> str:
    """The Hub dataset id of ``hub:owner/name``; `ConfigError` when it is not of that form.

    The owner is required: it keeps `datasets.load_dataset` from reading a local folder or one of its
    packaged builders (json, csv...) when given a bare name.
    """
    name = str(ref or "").strip()[len(HUB_PREFIX):].strip()
    if not HUB_OWNER_NAME_RE.match(name) or ".." in name:
        raise ConfigError(field, ref, allowed_key="error.allowed.hub_dataset")
    return name


def check_split(split: str, field: str = "hub_split") -> str:
    """A split expression as datasets accepts it: ``train``, ``train[:2000]``, ``train[10%:]``, ``train+test``."""
    split = str(split or "").strip()
    if not SPLIT_RE.match(split):
        raise ConfigError(field, split, allowed_key="error.allowed.hub_split")
    return split


def check_hub_config(name: str) -> str:
    """A Hub dataset config (subset) name, or empty for the default one."""
    name = str(name or "").strip()
    if name and not CONFIG_RE.match(name):
        raise ConfigError("hub_config", name, allowed_key="error.allowed.hub_config")
    return name


def parse_columns(spec: str | dict[str, str] | None, field: str = "columns") -> dict[str, str]:
    """``"instruction=question, output=answer"`` -> ``{"instruction": "question", "output": "answer"}``.

    Raises `ConfigError` for bad syntax, unknown targets, a target given twice, or targets of more than
    one format (the mapping's targets decide the format, see engine/data/formats.py `apply_columns`). Names
    are case-insensitive (engine/data/formats.py lower-cases column names).
    """
    if isinstance(spec, dict):
        pairs = list(spec.items())
    else:
        pairs = []
        for part in str(spec or "").split(","):
            if not part.strip():
                continue
            target, eq, source = part.partition("=")
            if not eq or not target.strip() or not source.strip():
                raise ConfigError(field, spec, allowed_key="error.allowed.mapping_pair", part=part.strip())
            pairs.append((target, source))
    mapping: dict[str, str] = {}
    for target, source in pairs:
        target, source = str(target).strip().lower(), str(source).strip().lower()
        if target not in COLUMN_TARGETS:
            raise ConfigError(field, spec, allowed_key="error.allowed.mapping_target", targets=", ".join(COLUMN_TARGETS), target=target)
        if target in mapping:
            raise ConfigError(field, spec, allowed_key="error.allowed.mapping_twice", target=target)
        mapping[target] = source
    joined = {"prompt_completion"} if _is_pair_mapping(mapping) or "label" in mapping else set()
    formats = sorted({COLUMN_TARGETS[t] for t in mapping if t not in SHARED_TARGETS} - joined)
    if len(formats) > 1:
        raise ConfigError(field, spec, allowed_key="error.allowed.mapping_mixed", formats=" + ".join(formats))
    return mapping


def _is_pair_mapping(mapping: dict[str, str]) -> bool:
    # 'prompt' is shared: with 'chosen'/'rejected' (and no 'completion') it names a preference pair's prompt
    return bool({"chosen", "rejected"} & set(mapping)) and "completion" not in mapping


def mapping_format(mapping: dict[str, str]) -> str | None:
    """The data format a (checked) column mapping makes: the format of its targets (engine/data/formats.py); None when
    it maps only a target every format shares (system), and the data's columns decide."""
    if _is_pair_mapping(mapping):
        return "preference"
    if "label" in mapping:
        return "unpaired"
    own = [t for t in mapping if t not in SHARED_TARGETS]
    return COLUMN_TARGETS[own[0]] if own else None


# --------------------------------------------------------------------------------------------------
# The gate for what a visitor names (see the module docstring)
# --------------------------------------------------------------------------------------------------

UPLOADS_DIRNAME = "_uploads"  # <runs>/_uploads/<session hash>/<keyed hash>-<name> (engine/views/uploads.py)
SESSION_DIR_RE = re.compile(r"^[0-9a-f]{16}$")  # a session's folder: the first 16 hex digits of a sha256
ANY_SESSION = "any-session"  # no scope set: any session's upload folder (the entry has checked the session itself)
# The scope of the current request (a context variable: per thread and task, never shared between two visitors' calls)
_VISITOR_UPLOADS: ContextVar[Path | str | None] = ContextVar("compact_lab_visitor_uploads", default=ANY_SESSION)
# What a refusal says, per kind of reference (language keys under gate.allowed)
GATE_ALLOWED = {"model": "gate.allowed.model", "dataset": "gate.allowed.dataset", "config": "gate.allowed.config"}
MODEL_REF_FIELDS = ("base_model", "teacher_model", "adapter")
DATA_REF_FIELDS = ("dataset", "eval_dataset")


@contextlib.contextmanager
def visitor_scope(uploads: Path | None) -> Iterator[None]:
    """Within this block, a visitor's references may name files only in `uploads` (their session's upload folder), or
    none at all (None: an MCP caller, who has no upload folder)."""
    token = _VISITOR_UPLOADS.set(None if uploads is None else Path(uploads))
    try:
        yield
    finally:
        _VISITOR_UPLOADS.reset(token)


def looks_like_path(ref: str) -> bool:
    """Does `ref` name something on the server's disk? Decided from its spelling only (looking at the disk would tell
    the caller whether a path exists): absolute, home- or dot-relative, a backslash, a '..' part, or a .json file."""
    ref = str(ref or "").strip()
    return (ref.startswith(("/", "~", ".")) or "\\" in ref or ".." in ref.split("/") or ref.lower().endswith(".json")
            or bool(re.match(r"^[A-Za-z]:", ref)))


def is_upload_file(path: Path) -> bool:
    """True for a file in some session's upload folder (``<...>/_uploads/<16 hex>/<file>``), symlinks resolved."""
    try:
        real = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return real.parent.parent.name == UPLOADS_DIRNAME and bool(SESSION_DIR_RE.match(real.parent.name))


def visitor_may_open(path: Path) -> bool:
    """May the current visitor (`visitor_scope`) name this file? Only one of their own uploads."""
    scope = _VISITOR_UPLOADS.get()
    if scope is None:
        return False
    if scope == ANY_SESSION:
        return is_upload_file(path)
    return is_upload_file(path) and is_within(Path(path).expanduser(), Path(scope))


def check_visitor_path(ref: str, field: str, kind: str = "dataset") -> str:
    """The gate for one path a visitor gives: on a shared app, one of their own uploads (then its resolved path is
    returned), else a ConfigError naming `field` and what `kind` of reference is allowed (GATE_ALLOWED), the same
    whether the path exists or not. On a local app and in the CLI the reference is returned as it is."""
    if not is_shared():
        return ref
    if visitor_may_open(Path(str(ref))):
        return str(Path(str(ref)).expanduser().resolve())
    raise ConfigError(field, ref, allowed_key=GATE_ALLOWED[kind])


def check_visitor_refs(values: Mapping[str, object]) -> None:
    """The gate for a job's references (a TrainConfig's fields by name, see MODEL_REF_FIELDS and DATA_REF_FIELDS), run
    where every entry's job starts (engine/training/jobs.py `JobManager.start`): on a shared app no model is named by a
    server path, and a dataset is built-in, hub:owner/name or one of the visitor's uploads."""
    if not is_shared():
        return
    for field in MODEL_REF_FIELDS:
        ref = str(values.get(field) or "")
        if ref and looks_like_path(ref):
            raise ConfigError(field, ref, allowed_key=GATE_ALLOWED["model"])
    for field in DATA_REF_FIELDS:
        ref = str(values.get(field) or "").strip()
        if ref and not ref.startswith((BUILTIN_PREFIX, HUB_PREFIX)):
            check_visitor_path(ref, field, "dataset")
