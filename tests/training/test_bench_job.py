"""A benchmark as a job, like training: a subprocess with its events and its log, one job at a time beside training (each refuses
the other), stopped by killing its process tree with the finished tasks kept, and started again skipping them; on a run, its
base is scored too (before/after), and the run history shows the scores."""

from __future__ import annotations

import os
import time

import pytest
from conftest import make_adapter_run, wait_for_no_live_run

from engine.config import BenchConfig, TrainConfig
from engine.errors import EngineError, JobError
from engine.inference.harness import read_results
from engine.training.bench_job import BENCH_EVENTS, BenchJobs
from engine.training.jobs import JobManager
from engine.training.processes import proc_start_time

pytest.importorskip("lm_eval", reason="requirements-eval.txt")


def _wait(bench: BenchJobs, folder, until, timeout: float = 300.0) -> list[dict]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        events = bench.events(folder)
        if until(events):
            return events
        time.sleep(0.3)
    raise AssertionError(f"timed out: {bench.events(folder)}; log: {(folder / 'bench.log').read_text()[-3000:]}")


def _types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def test_a_run_is_scored_with_its_base_stopped_and_restarted_where_it_was(runs_dir):
    wait_for_no_live_run(runs_dir)
    make_adapter_run(runs_dir, "bench-lora")
    jobs = JobManager(runs_dir, owner_only=True)  # as on a shared app: only the browser that started it may stop it
    bench = BenchJobs(jobs)
    cfg = BenchConfig(model="run:bench-lora", tasks="dates_mc,dates_iso", limit=2, batch_size=4)
    folder = bench.start(cfg, owner="browser-a")
    assert folder == runs_dir / "bench-lora" / "benchmarks" and bench.active() == folder
    proc = next(iter(bench._procs.values()))
    assert proc.pid != os.getpid()  # a child process, not this one
    # one job at a time: training and a second benchmark wait for it
    with pytest.raises(JobError, match="benchmark of run:bench-lora is running"):
        jobs.start(TrainConfig(run_name="while-benchmarking"))
    assert not (runs_dir / "while-benchmarking").exists()
    with pytest.raises(JobError, match="benchmark"):
        bench.start(BenchConfig(model="builtin:compact-mini", limit=2))
    # the base's first task finishes, then Stop kills the tree; what finished is kept
    _wait(bench, folder, lambda ev: "bench_result" in _types(ev))
    with pytest.raises(JobError, match="another browser"):
        bench.stop(owner="browser-b")
    assert bench.stop(owner="browser-a") == folder
    assert bench.active() is None and _types(bench.events(folder))[-1] == "bench_stopped"
    base_folder = runs_dir / "_benchmarks" / "builtin-compact-mini-none"
    kept = read_results(base_folder) | read_results(folder)
    assert "dates_mc" in read_results(base_folder) and len(kept) < 4
    from engine.views.bench_view import status_md

    assert "Stopped" in status_md(bench.events(folder), False, "en")
    # started again: the finished task is skipped, the rest is scored
    bench.start(cfg, owner="browser-a")
    events = _wait(bench, folder, lambda ev: _types(ev)[-1:] in (["bench_done"], ["bench_error"]))
    assert _types(events)[-1] == "bench_done", events
    assert any(e["type"] == "bench_skip" and e["side"] == "base" and e["task"] == "dates_mc" for e in events)
    assert set(read_results(folder)) == set(read_results(base_folder)) == {"dates_mc", "dates_iso"}
    assert read_results(folder)["dates_mc"]["model"] == "run:bench-lora" and read_results(folder)["dates_mc"]["n"] == 2
    # the before/after table and the run history
    from engine.views.bench_view import comparison, sides
    from engine.views.run_history import run_details_md

    table, bars = comparison(sides(runs_dir, "run:bench-lora"), "en")
    assert list(table.columns) == ["Task", "Metric", "Before (base): builtin:compact-mini", "After: run:bench-lora", "Change"]
    assert list(table["Task"]) == ["dates_mc", "dates_iso"] and "±" in table.iloc[0, 2]
    assert set(bars["model"]) == {"builtin:compact-mini", "run:bench-lora"} and len(bars) == 4
    details = run_details_md(jobs.status("bench-lora"), "pt-BR")
    assert "- Benchmarks: dates_mc " in details and "(base " in details


def test_a_benchmark_waits_for_training_and_a_refused_one_writes_nothing(runs_dir, tmp_path):
    runs = tmp_path / "runs"
    jobs = JobManager(runs)
    bench = BenchJobs(jobs)
    training = runs / "training-one"
    training.mkdir(parents=True)
    (training / "config.yaml").write_text("method: lora\nbase_model: builtin:compact-mini\n", encoding="utf-8")
    (training / "pid").write_text(f"{os.getpid()} {proc_start_time(os.getpid()) or ''}\n", encoding="utf-8")
    with pytest.raises(JobError, match="'training-one' is training"):
        bench.start(BenchConfig(limit=2))
    (training / "pid").unlink()
    with pytest.raises(EngineError, match="needs about"):
        bench.start(BenchConfig(model="Qwen/Qwen2.5-72B-Instruct"))
    assert not (runs / "_benchmarks").exists()  # refused before anything was written
    with pytest.raises(EngineError):
        bench.start(BenchConfig(model="run:no-such-run"))
    assert bench.active() is None and bench.stop() is None
    assert BENCH_EVENTS == "bench_events.jsonl"
