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
        raise DataError(f"hub:{name}: a local folder has that name; Hub references must name a dataset on the Hub. Upload files through the form instead.")
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core requirement
        raise DataError("Loading Hub datasets needs the 'datasets' package. Upload the data as a file instead.") from None
    where = f"hub:{name}" + (f" (config {config!r})" if config else "") + f" split {split!r}"
    # An unsliced split is asked for with a row cap one past the limit (train -> train[:200001]): datasets then builds
    # and converts only those rows, and more than the limit still gets the message below.
    wanted = split if "[" in split else "+".join(f"{part}[:{MAX_HUB_ROWS + 1}]" for part in split.split("+"))
    try:
        ds = datasets.load_dataset(name, config or None, split=wanted, **token_kwargs())  # shared: never the server's token
    except Exception as err:  # every failure becomes a message; the kinds below get specific advice
        raise DataError(_hub_error(name, where, err)) from None
    if isinstance(ds, dict):  # a DatasetDict (not expected with a split given)
        raise DataError(f"{where}: expected one split, got {', '.join(ds)}. Set the split, e.g. train.")
    n = len(ds)
    if n == 0:
        raise DataError(f"{where} has no rows. Check the split (and its slice).")
    if n > MAX_HUB_ROWS:
        base = split.split("[", 1)[0]
        raise DataError(
            f"{where} has {n:,} rows; at most {MAX_HUB_ROWS:,} are loaded for training here. "
            f"Take a slice with the split, e.g. {base}[:20000] (a few thousand rows are plenty for a LoRA fine-tune)."
        )
    return list(enumerate(ds.to_list(), start=1))


def _hub_error(name: str, where: str, err: Exception) -> str:
    from datasets.exceptions import DataFilesNotFoundError, DatasetNotFoundError

    text = str(err).split("\n", 1)[0]
    upload = "Or download the data and upload it as a file (.jsonl, .csv, .parquet...)."
    if isinstance(err, ConnectionError) or "offline" in text.lower():
        return (f"Cannot load {where}: the Hugging Face Hub is not reachable (offline, or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set) "
                f"and the dataset is not in the local cache. Connect to the internet and try again, or upload the data as a file "
                f"(.jsonl, .csv, .parquet...) or pick a built-in sample.")
    if isinstance(err, DatasetNotFoundError):
        if "gated" in text:
            return (f"Cannot load {where}: it is a gated dataset. Accept its terms on https://huggingface.co/datasets/{name} and log in "
                    f"(set HF_TOKEN, or `hf auth login`), then try again. {upload}")
        return (f"Cannot load {where}: no such dataset on the Hub, or it is private. Check the name (owner/name, as in "
                f"https://huggingface.co/datasets/OWNER/NAME); for a private dataset log in (HF_TOKEN). {upload}")
    if isinstance(err, DataFilesNotFoundError):
        return f"Cannot load {where}: the repository has no data files that can be read (csv, json, parquet...). {upload}"
    if "scripts are no longer supported" in text or "trust_remote_code" in text:
        return (f"Cannot load {where}: it needs a loading script (remote code), which is never run here. Look on the Hub for a "
                f"Parquet version of it, or another copy of the data. {upload}")
    if "BuilderConfig" in text or "Config name is missing" in text or ("config" in text.lower() and "available" in text.lower()):
        return f"Cannot load {where}: {text} Set 'Hub config' to one of the available configurations."
    if "split" in text.lower():
        return f"Cannot load {where}: {text} Set 'Hub split' to one of the splits (slicing such as train[:2000] is allowed)."
    return f"Cannot load {where} ({type(err).__name__}: {text}). {upload}"
