"""Merging as a job: a subprocess like training (never in the app process), on the CPU when the estimator says the GPU
cannot hold the unquantized base, and never beside a training run (one job at a time) — through the engine API and
through the app (gradio_client)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from conftest import make_adapter_run, running_app, wait_for_no_live_run

from engine.errors import JobError
from engine.export.merge import merge_plan
from engine.hardware.device import DeviceInfo
from engine.training.jobs import JobManager

T4 = DeviceInfo("cuda", "Tesla T4", 14.58, False, (7, 5))
RTX3060 = DeviceInfo("cuda", "NVIDIA GeForce RTX 3060", 11.76, True, (8, 6))
A100 = DeviceInfo("cuda", "NVIDIA A100-SXM4-40GB", 39.39, True, (8, 0))
CPU = DeviceInfo("cpu", "x86 CPU", 16.0, True, None)


def _finished(run_dir: Path) -> None:
    (run_dir / "events.jsonl").write_text(json.dumps({"type": "start", "time": time.time()}) + "\n"
                                          + json.dumps({"type": "done", "output": "adapter", "time": time.time()}) + "\n", encoding="utf-8")


def _catalog_run(runs: Path, name: str, base: str) -> Path:
    run = runs / name
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter_config.json").write_text("{}", encoding="utf-8")
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "qlora", "base_model": base}), encoding="utf-8")
    return run


# ---- where the merge runs: one test per device ----

@pytest.mark.parametrize(("device", "free", "expected"), [
    (T4, 14.0, "auto"),      # Llama-3.2-3B in fp16: ~6.4 GiB + margin fits a free T4
    (T4, 5.0, "cpu"),        # a training run or the playground holds most of the card
    (RTX3060, 11.0, "auto"),
    (RTX3060, 3.0, "cpu"),
    (A100, 38.0, "auto"),
    (CPU, None, "cpu"),
])
def test_merge_plan_per_device(tmp_path, device, free, expected):
    run = _catalog_run(tmp_path, "q3b", "llama-3.2-3b")
    plan = merge_plan(run, tmp_path, device, free)
    assert plan.device == expected, plan
    if device.kind == "cuda":
        assert plan.need_gib and 6.0 < plan.need_gib < 9.0 and "GiB" in plan.reason


def test_merge_plan_of_an_unknown_base_is_the_cpu(tmp_path):
    run = _catalog_run(tmp_path, "unknown", "someone/not-in-the-catalog-offline")
    assert merge_plan(run, tmp_path, A100, 38.0).device == "cpu"


# ---- one job at a time ----

def _fake_live(run_dir: Path, pid_name: str) -> None:
    from engine.training.processes import proc_start_time

    (run_dir / pid_name).write_text(f"{os.getpid()} {proc_start_time(os.getpid()) or ''}\n", encoding="utf-8")


def test_merge_is_refused_beside_training_and_training_beside_a_merge(tmp_path, runs_dir):
    from engine.config import TrainConfig

    runs = tmp_path / "runs"
    jobs = JobManager(runs)
    done = _catalog_run(runs, "finished-one", "llama-3.2-1b")
    _finished(done)
    training = _catalog_run(runs, "training-one", "llama-3.2-1b")
    _fake_live(training, "pid")
    with pytest.raises(JobError, match="'training-one' is training"):
        jobs.start_merge("finished-one")
    (training / "pid").unlink()
    _fake_live(done, "merge.pid")
    assert jobs.active_merge() == "finished-one"
    with pytest.raises(JobError, match="being merged"):
        jobs.start(TrainConfig(run_name="another"))
    with pytest.raises(JobError, match="being merged"):
        jobs.start_merge("finished-one")
    (done / "merge.pid").unlink()
    with pytest.raises(JobError, match="has not finished"):
        jobs.start_merge("training-one")


# ---- the real subprocess ----

def _wait_merge(jobs: JobManager, name: str, timeout: float = 240.0) -> list[dict]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        events = jobs.merge_events(name)
        if events and events[-1]["type"] in ("merge_done", "merge_error") and jobs.active_merge() is None:
            return events
        time.sleep(0.5)
    raise AssertionError(f"merge did not finish: {jobs.merge_events(name)}; log: {(jobs.runs_dir / name / 'merge.log').read_text()[-2000:]}")


def test_merge_runs_in_a_subprocess_and_writes_events(runs_dir):
    wait_for_no_live_run(runs_dir)
    make_adapter_run(runs_dir, "merge-job")
    _finished(runs_dir / "merge-job")
    jobs = JobManager(runs_dir)
    jobs.start_merge("merge-job", device="cpu")
    proc = jobs._procs["merge:merge-job"]
    assert proc.pid != os.getpid()  # a child process, not this one
    events = _wait_merge(jobs, "merge-job")
    assert [e["type"] for e in events] == ["merge_start", "merge_done"], events
    assert events[0]["device"] == "cpu" and events[-1]["path"].endswith("merged")
    assert (runs_dir / "merge-job" / "merged" / "config.json").exists()
    from engine.views.run_view import merge_status_md

    assert "Merged model saved" in merge_status_md(jobs, "merge-job") and "run:merge-job/merged" in merge_status_md(jobs, "merge-job")


def test_merge_failure_is_recorded(runs_dir):
    runs = runs_dir
    wait_for_no_live_run(runs)
    run = runs / "merge-broken"
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter_config.json").write_text("{}", encoding="utf-8")
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "lora", "base_model": "builtin:compact-mini"}), encoding="utf-8")
    _finished(run)
    jobs = JobManager(runs)
    jobs.start_merge("merge-broken", device="cpu")
    events = _wait_merge(jobs, "merge-broken")
    assert events[-1]["type"] == "merge_error" and events[-1]["message"]
    from engine.views.run_view import merge_status_md

    assert merge_status_md(jobs, "merge-broken").startswith("⋈ **Merge failed:**")


def test_merge_through_the_app(runs_dir):
    from gradio_client import Client

    wait_for_no_live_run(runs_dir)
    make_adapter_run(runs_dir, "merge-app")
    _finished(runs_dir / "merge-app")
    with running_app(runs_dir) as demo:
        client = Client(demo.local_url, verbose=False)
        client.predict("merge-app", api_name="/merge_adapter")  # returns at once: the merge runs in its own process
        events = _wait_merge(JobManager(runs_dir), "merge-app")
    assert events[-1]["type"] == "merge_done"
    assert (runs_dir / "merge-app" / "merged" / "model.safetensors").exists()
