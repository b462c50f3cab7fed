"""Reference grammar and path policy: how models, runs and datasets are named, in one place.

The references the app and the CLI accept:

- ``builtin:NAME``      a built-in compact model (or a built-in dataset sample)
- ``run:NAME``          a run folder ``<runs>/NAME``; ``run:NAME/merged`` its merged 16-bit model
- ``hub:owner/name``    a Hugging Face dataset (config, split and column mapping checked here too)
- ``owner/name``        a Hugging Face model id (a legacy single name such as ``gpt2`` too, where the loader takes it)

Several callers check names at different points, and their rules are not all the same: the loader caps a
run name at 100 characters, the browser boundary does not; a dataset id needs its owner, a model id may
omit it. Each distinct rule is one public name below, documented with where it applies, so the
differences are visible and none is copied. This module sits at the bottom of the engine: it imports
`errors` only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import ConfigError, ModelLoadError

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


def default_runs_dir() -> Path:
    """The runs directory: $COMPACT_LAB_RUNS or ./runs, created if missing."""
    path = Path(os.environ.get("COMPACT_LAB_RUNS") or "runs").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_ref_dir(name: str, runs_dir: Path) -> Path:
    """The folder of the run named by a run:NAME model reference; `ModelLoadError` for a name that could
    escape the runs directory."""
    if not is_valid_run_name(name):
        raise ModelLoadError(
            f"Run name {name!r} is not valid: a run is named by its folder inside the runs directory "
            "(letters, digits, '-', '_' and '.'; no path separators or '..')."
        )
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
}
MAPPING_SYNTAX = "target=source pairs separated by commas, e.g. 'instruction=question, output=answer', 'text=body' or 'messages=conversation'"


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
        raise ConfigError(field, ref, "hub:owner/name as in the dataset's Hub address, e.g. hub:tatsu-lab/alpaca")
    return name


def check_split(split: str, field: str = "hub_split") -> str:
    """A split expression as datasets accepts it: ``train``, ``train[:2000]``, ``train[10%:]``, ``train+test``."""
    split = str(split or "").strip()
    if not SPLIT_RE.match(split):
        raise ConfigError(field, split, "a split name such as train or test, optionally sliced: train[:2000], train[:10%], train[100:200]")
    return split


def check_hub_config(name: str) -> str:
    """A Hub dataset config (subset) name, or empty for the default one."""
    name = str(name or "").strip()
    if name and not CONFIG_RE.match(name):
        raise ConfigError("hub_config", name, "the name of a configuration (subset) of the Hub dataset, e.g. 'en', or empty for the default")
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
                raise ConfigError(field, spec, f"{MAPPING_SYNTAX} ({part.strip()!r} has no target=source)")
            pairs.append((target, source))
    mapping: dict[str, str] = {}
    for target, source in pairs:
        target, source = str(target).strip().lower(), str(source).strip().lower()
        if target not in COLUMN_TARGETS:
            raise ConfigError(field, spec, f"targets among {', '.join(COLUMN_TARGETS)} ({target!r} is not one of them); {MAPPING_SYNTAX}")
        if target in mapping:
            raise ConfigError(field, spec, f"each target once ({target!r} is given twice)")
        mapping[target] = source
    formats = sorted({COLUMN_TARGETS[t] for t in mapping} - ({"prompt_completion"} if _is_pair_mapping(mapping) else set()))
    if len(formats) > 1:
        raise ConfigError(field, spec, f"targets of a single format (these mix {' and '.join(formats)}); {MAPPING_SYNTAX}")
    return mapping


def _is_pair_mapping(mapping: dict[str, str]) -> bool:
    # 'prompt' is shared: with 'chosen'/'rejected' (and no 'completion') it names a preference pair's prompt
    return bool({"chosen", "rejected"} & set(mapping)) and "completion" not in mapping


def mapping_format(mapping: dict[str, str]) -> str:
    """The data format a (checked) column mapping makes: the format of its targets (engine/data/formats.py)."""
    return "preference" if _is_pair_mapping(mapping) else COLUMN_TARGETS[next(iter(mapping))]
