"""The Benchmarks tab through the launched app (gradio_client): a job started from the page on a run scores its base and the
run offline, the page's endpoint returns the before/after table and the chart's data, and a bad task name or a model too big
is refused with a message naming the cause."""

from __future__ import annotations

import json
import time

import pytest
from conftest import make_adapter_run, running_app, wait_for_no_live_run

pytest.importorskip("lm_eval", reason="requirements-eval.txt")


def test_benchmarks_from_the_page_on_a_run_offline(runs_dir):
    from gradio_client import Client

    wait_for_no_live_run(runs_dir)
    make_adapter_run(runs_dir, "bench-page", seed=3)
    with running_app(runs_dir) as demo:
        client = Client(demo.local_url, verbose=False)
        with pytest.raises(Exception, match="tasks") as err:
            client.predict("run:bench-page", ["mmlu_pt"], 2, "auto", 4, True, api_name="/bench_start")
        assert "dates_mc" in str(err.value)  # the allowed names are listed
        with pytest.raises(Exception, match="needs about"):
            client.predict("Qwen/Qwen2.5-72B-Instruct", ["dates_mc"], 2, "none", 4, True, api_name="/bench_start")
        status, *_ = client.predict("run:bench-page", ["dates_mc"], 2, "auto", 4, True, api_name="/bench_start")
        assert status.startswith("◷")
        deadline = time.time() + 300
        while time.time() < deadline:
            status, table, bars, _timer = client.predict("run:bench-page", api_name="/bench_results")
            if not status.startswith("◷"):
                break
            time.sleep(1)
    assert status.startswith("✔"), status
    assert table["headers"] == ["Task", "Metric", "Before (base): builtin:compact-mini", "After: run:bench-page", "Change"]
    row = table["data"][0]
    assert row[0] == "dates_mc" and row[1] == "acc" and "±" in row[2] and "±" in row[3]
    plotted = json.dumps(bars)  # the bar chart's data: a bar per model and task
    assert "builtin:compact-mini" in plotted and "run:bench-page" in plotted
