"""The watched run's refresh sends only what changed, and the plot at most every PLOT_EVERY_S while the run trains."""

from __future__ import annotations

import pandas as pd

from engine.views.refresh import PLOT_EVERY_S, changed_parts, fingerprint


def test_fingerprint_is_by_content():
    a = pd.DataFrame({"step": [1, 2], "loss": [2.0, 1.5]})
    assert fingerprint(a) == fingerprint(a.copy())
    assert fingerprint(a) != fingerprint(pd.DataFrame({"step": [1, 2], "loss": [2.0, 1.4]}))
    assert fingerprint(a) != fingerprint(a.rename(columns={"loss": "perda"}))
    assert fingerprint("x") == fingerprint("x") != fingerprint("y")


def test_only_changed_parts_are_sent():
    send, seen = changed_parts(None, ["status", "log"], now=0.0)
    assert send == [True, True]  # the first refresh sends everything
    send, seen = changed_parts(seen, ["status", "log"], now=1.0)
    assert send == [False, False]
    send, seen = changed_parts(seen, ["status 2", "log"], now=2.0)
    assert send == [True, False]


def test_the_plot_waits_while_the_run_trains_and_comes_when_it_ends():
    plot = pd.DataFrame({"step": [1], "loss": [2.0]})
    send, seen = changed_parts(None, ["s", plot], now=0.0, plot_index=1, running=True)
    assert send == [True, True]
    more = pd.DataFrame({"step": [1, 2], "loss": [2.0, 1.0]})
    send, seen = changed_parts(seen, ["s2", more], now=1.0, plot_index=1, running=True)
    assert send == [True, False]  # too soon for the plot; the status goes at once
    send, seen = changed_parts(seen, ["s2", more], now=PLOT_EVERY_S + 0.1, plot_index=1, running=True)
    assert send == [False, True]  # the held-back points arrive once it is due
    last = pd.DataFrame({"step": [1, 2, 3], "loss": [2.0, 1.0, 0.5]})
    send, seen = changed_parts(seen, ["done", last], now=PLOT_EVERY_S + 0.2, plot_index=1, running=False)
    assert send == [True, True]  # a finished run's last points are not held back
