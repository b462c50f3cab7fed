"""What a periodic refresh of the watched run needs to send to the browser: only the parts that changed, and the loss
plot at most every few seconds while the run trains.

Why: on a 2-core laptop the browser that watches a run shares the CPU with the training. Refreshing every part every
second slowed the training by 41% (0.191 s a step watched vs 0.135 unwatched); with this, a 2-second timer that sleeps
when nothing moves (ui/finetune_run.py), 22% (0.165). Most of what is left is the browser's fixed cost per refresh, whatever it
carries. bench/watch_cost.py measures it."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import pandas as pd

PLOT_EVERY_S = 5.0  # while the run trains, the plot is redrawn at most this often (always once more when it ends)


def fingerprint(value: Any) -> str:
    """A short digest of a part's value: equal values give equal digests (DataFrames by content)."""
    if isinstance(value, pd.DataFrame):
        data = pd.util.hash_pandas_object(value, index=True).values.tobytes() + repr(list(value.columns)).encode()
    else:
        data = repr(value).encode()
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def changed_parts(seen: dict[str, Any] | None, values: Sequence[Any], *, now: float, plot_index: int | None = None,
                  running: bool = False) -> tuple[list[bool], dict[str, Any]]:
    """Which of `values` to send: (send each?, the new record). `seen` is the record returned by the previous call for
    this browser (None at first: everything is sent). A part is sent when its digest changed; the plot (at
    `plot_index`), while `running`, only when PLOT_EVERY_S have passed since it was last sent."""
    seen = dict(seen or {})
    send = []
    for i, value in enumerate(values):
        digest = fingerprint(value)
        key = str(i)
        due = not (i == plot_index and running and now - seen.get("plot_at", float("-inf")) < PLOT_EVERY_S)
        if seen.get(key) != digest and due:
            seen[key] = digest
            if i == plot_index:
                seen["plot_at"] = now
            send.append(True)
        else:
            send.append(False)
    return send, seen
