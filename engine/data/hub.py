"""Hub datasets: the rows of a ``hub:owner/name`` split, loaded with `datasets.load_dataset`.

Config name + split, slicing such as ``train[:2000]``; cached in the usual Hugging Face cache; never with remote
code. Every failure (offline, unknown or gated dataset, a loading script, a bad config or split) becomes a
`DataError` that says what to do. The rows then go through the same normalization as files
(engine/data/formats.py `normalize`).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import DataError
from ..sharing import token_kwargs

# A whole split is converted to Python rows; beyond this a slice is the sensible thing to ask for.
MAX_HUB_ROWS = 200_000


def load_hub_rows(name: str, config: str = "", split: str = "train") -> list[tuple[int, Any]]:
    """Rows of a Hub dataset split as (1-based position, dict) pairs, via `datasets.load_dataset`.

    Downloads once into the Hugging Face cache (HF_HOME / HF_DATASETS_CACHE) and reuses it, offline too.
    Loading scripts are never run (datasets 5 refuses them anyway; `trust_remote_code` is not passed).
    """
    if os.path.exists(name):  # load_dataset would read a local folder of that name instead of the Hub
        raise DataError(key="error.hub_data.local_folder", name=name)
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core requirement
        raise DataError(key="error.hub_data.needs_datasets") from None
    where = f"hub:{name}" + (f" ({config})" if config else "") + f" [{split}]"  # no words: shown in either language
    # An unsliced split is asked for with a row cap one past the limit (train -> train[:200001]): datasets then builds
    # and converts only those rows, and more than the limit still gets the message below.
    wanted = split if "[" in split else "+".join(f"{part}[:{MAX_HUB_ROWS + 1}]" for part in split.split("+"))
    try:
        ds = datasets.load_dataset(name, config or None, split=wanted, **token_kwargs())  # shared: never the server's token
    except Exception as err:  # every failure becomes a message; the kinds below get specific advice
        raise _hub_error(name, where, err) from None
    if isinstance(ds, dict):  # a DatasetDict (not expected with a split given)
        raise DataError(key="error.hub_data.several_splits", where=where, splits=", ".join(ds))
    n = len(ds)
    if n == 0:
        raise DataError(key="error.hub_data.no_rows", where=where)
    if n > MAX_HUB_ROWS:
        raise DataError(key="error.hub_data.too_many_rows", where=where, n=n, max=MAX_HUB_ROWS, base=split.split("[", 1)[0])
    return list(enumerate(ds.to_list(), start=1))


def _hub_error(name: str, where: str, err: Exception) -> DataError:
    from datasets.exceptions import DataFilesNotFoundError, DatasetNotFoundError

    text = str(err).split("\n", 1)[0]
    if isinstance(err, ConnectionError) or "offline" in text.lower():
        return DataError(key="error.hub_data.offline", where=where)
    if isinstance(err, DatasetNotFoundError):
        if "gated" in text:
            return DataError(key="error.hub_data.gated", where=where, name=name)
        return DataError(key="error.hub_data.not_found", where=where)
    if isinstance(err, DataFilesNotFoundError):
        return DataError(key="error.hub_data.no_files", where=where)
    if "scripts are no longer supported" in text or "trust_remote_code" in text:
        return DataError(key="error.hub_data.script", where=where)
    # the library's own sentence (it lists the configurations or splits) is quoted as it is
    if "BuilderConfig" in text or "Config name is missing" in text or ("config" in text.lower() and "available" in text.lower()):
        return DataError(key="error.hub_data.config", where=where, detail=text)
    if "split" in text.lower():
        return DataError(key="error.hub_data.split", where=where, detail=text)
    return DataError(key="error.hub_data.other", where=where, kind=type(err).__name__, detail=text)
