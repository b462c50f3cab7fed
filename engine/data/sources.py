"""The reference grammar of dataset sources: ``hub:owner/name`` references, Hub split and config names, and the
``columns`` mapping syntax (``instruction=question, output=answer``) with its targets.

Pure checks, used by TrainConfig and by the browser-path checks of engine/estimator/handoff.py; the data itself is
read by engine/data/files.py (files), engine/data/hub.py (Hub datasets) and engine/data/formats.py (the mapping).
"""

from __future__ import annotations

import re

from ..errors import ConfigError

HUB_PREFIX = "hub:"
HUB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_SLICE = r"(\[[-0-9%:. ]*\])?"
SPLIT_RE = re.compile(rf"^[A-Za-z0-9_.-]+{_SLICE}(\+[A-Za-z0-9_.-]+{_SLICE})*$")
CONFIG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")

# mapping target -> the format it belongs to (the targets of one mapping must belong to one format)
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
    if not HUB_NAME_RE.match(name) or ".." in name:
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
    one format (the mapping's targets decide the format, see `apply_columns`). Names are case-insensitive
    (data.py lower-cases column names).
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
    formats = sorted({COLUMN_TARGETS[t] for t in mapping})
    if len(formats) > 1:
        raise ConfigError(field, spec, f"targets of a single format (these mix {' and '.join(formats)}); {MAPPING_SYNTAX}")
    return mapping
