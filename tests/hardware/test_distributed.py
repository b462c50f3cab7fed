"""Multi-process training: `accelerate launch` runs the same `-m engine train` command on 2 CPU processes (DDP over
gloo). One run folder, one writer: no duplicate events, the optimizer-step count of a 1-process run, a loadable
output, and a STOP file that stops every rank at the same step."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from engine.config import TrainConfig
from engine.fields import to_dict
from engine.hardware import distributed
from engine.runs import read_events

REPO = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"

# The launcher form the docs and the app's "Show command" give (docs/multi_gpu.md); on a machine without GPUs,
# --multi_gpu still spawns the processes (torchrun) and the Trainer picks gloo (use_cpu).
LAUNCH = distributed.launch_command("run.yaml", 2)

pytestmark = pytest.mark.skipif(not ACCELERATE.exists(), reason="accelerate's launcher is not installed in this environment")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(runs_dir: Path, tmp_path: Path, cfg: TrainConfig, run_dir: Path, on_start=None, timeout: int = 420,
            extra: tuple[str, ...] = (), resume: bool = False, cuda: bool = False) -> subprocess.CompletedProcess:
    if resume:  # a resumed run always reads its own config.yaml (engine/cli.py refuses any other)
        config, extra = run_dir / "config.yaml", ("--resume", *extra)
    else:
        config = tmp_path / "run.yaml"
        config.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")
    argv = shlex.split(LAUNCH.replace("run.yaml", str(config)))
    assert argv[:2] == ["accelerate", "launch"]
    # Flags accelerate would otherwise ask `accelerate config` for; a free rendezvous port (other tests may run).
    cmd = [str(ACCELERATE), "launch", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), *argv[2:], "--run-dir", str(run_dir), *extra]
    env = {**os.environ, "COMPACT_LAB_RUNS": str(runs_dir), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "HF_HOME": str(tmp_path / "hf_home"),  # never read a developer's ~/.cache/huggingface/accelerate config
           "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    if cuda:  # the GPU tests (tests/hardware/test_fsdp.py) keep the machine's GPUs
        env.pop("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0,1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    with open(tmp_path / "launch.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if on_start is not None:
            on_start(proc)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("the 2-process run hung:\n" + (tmp_path / "launch.log").read_text(errors="replace")[-4000:]) from None
    return subprocess.CompletedProcess(cmd, rc, (tmp_path / "launch.log").read_text(errors="replace"), "")


def _cfg(name: str, **kw) -> TrainConfig:
    base = dict(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=3, micro_batch_size=2, grad_accum=1,
                max_seq_len=64, logging_steps=1, save_steps=2, eval_fraction=0.1, learning_rate=1e-3, run_name=name)
    base.update(kw)
    return TrainConfig(**base)


def test_helpers_are_noops_in_one_process(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert distributed.world_size() == 1 and distributed.is_main_process() and not distributed.is_distributed()
    assert distributed.any_rank(True) and not distributed.any_rank(False)
    assert distributed.broadcast_object({"a": 1}) == {"a": 1}
    distributed.barrier()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not distributed.is_main_process() and distributed.world_size() == 2


def test_eventlog_writes_on_rank0_only(tmp_path, monkeypatch):
    from engine.runs import EventLog

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    EventLog(tmp_path / "events.jsonl").write("progress", step=1)
    assert not (tmp_path / "events.jsonl").exists()
    EventLog(tmp_path / "events.jsonl", all_ranks=True).write("error", message="rank 1 failed")
    monkeypatch.setenv("RANK", "0")
    EventLog(tmp_path / "events.jsonl").write("progress", step=1)
    events = read_events(tmp_path)
    assert [(e["type"], e.get("rank")) for e in events] == [("error", 1), ("progress", None)]


@pytest.mark.slow
def test_two_processes_train_one_run(runs_dir, tmp_path):
    from engine.models.loading import load_model

    cfg = _cfg("t-ddp")
    run_dir = runs_dir / cfg.run_name
    res = _launch(runs_dir, tmp_path, cfg, run_dir)
    assert res.returncode == 0, res.stdout[-4000:]
    events = read_events(run_dir)
    types = [e["type"] for e in events]
    assert types.count("start") == 1 and types.count("done") == 1 and types[-1] == "done", types
    start = next(e for e in events if e["type"] == "start")
    assert start["world_size"] == 2 and start["device_kind"] == "cpu"
    # max_steps counts optimizer steps, as in one process: each step now sees 2 × micro batch examples.
    progress = [e["step"] for e in events if e["type"] == "progress"]
    assert progress == sorted(set(progress)) and progress[-1] == 3, progress  # one line per step, not one per rank
    # The data really is split over 2 ranks: an epoch takes half the steps it takes in one process.
    data = next(e for e in events if e["type"] == "data")
    first = next(e for e in events if e["type"] == "progress")
    assert first["epoch"] == pytest.approx(2 * cfg.micro_batch_size / data["train_examples"], rel=0.05), (first, data)
    done = events[-1]
    assert done["steps"] == 3 and done["output"] == "adapter"
    assert sorted(e["when"] for e in events if e["type"] == "task_score") == ["after", "before"]
    assert not any(e.get("rank") for e in events)
    assert {p.name for p in run_dir.iterdir() if p.name.startswith("checkpoint-")} >= {"checkpoint-2"}
    loaded = load_model(f"run:{cfg.run_name}", runs_dir=runs_dir)
    assert loaded.model is not None
    # the app sees the headless run (rank 0 recorded its pid; now exited) as finished
    from engine.training.jobs import JobManager

    assert (run_dir / "pid").exists() and JobManager(runs_dir).status(cfg.run_name).state == "finished"


@pytest.mark.slow
def test_stop_file_stops_every_rank(runs_dir, tmp_path):
    cfg = _cfg("t-ddp-stop", max_steps=12, save_steps=1000, eval_fraction=0.0, dataset="builtin:instructions")
    run_dir = runs_dir / cfg.run_name

    def stop_after_two_steps(proc):
        def watch():
            deadline = time.time() + 300
            while time.time() < deadline and proc.poll() is None:
                if any(e["type"] == "progress" and e["step"] >= 2 for e in read_events(run_dir)):
                    (run_dir / "STOP").write_text("stop")
                    return
                time.sleep(0.2)

        threading.Thread(target=watch, daemon=True).start()

    res = _launch(runs_dir, tmp_path, cfg, run_dir, on_start=stop_after_two_steps)
    assert res.returncode == 0, res.stdout[-4000:]  # no rank left behind waiting in an all-reduce
    events = read_events(run_dir)
    stopped = [e for e in events if e["type"] == "stopped"]
    assert len(stopped) == 1 and events[-1]["type"] == "stopped", [e["type"] for e in events]
    assert 2 <= stopped[0]["step"] < 12 and stopped[0]["checkpoint"] == f"checkpoint-{stopped[0]['step']}"
    assert not (run_dir / "STOP").exists()
    # resumed by the same launch command with the run's own config: both ranks pick the same checkpoint and finish
    res = _launch(runs_dir, tmp_path, cfg, run_dir, resume=True)
    assert res.returncode == 0, res.stdout[-4000:]
    events = read_events(run_dir)
    assert events[-1]["type"] == "done" and events[-1]["steps"] == 12
    assert [e["resumed_from"] for e in events if e["type"] == "start"][-1] == stopped[0]["checkpoint"]


@pytest.mark.slow
def test_two_processes_train_from_scratch(runs_dir, tmp_path):
    """From scratch, each rank would train its own tokenizer: rank 0's is broadcast so the embeddings match."""
    cfg = _cfg("t-ddp-scratch", method="scratch", dataset="builtin:corpus", max_steps=2, eval_fraction=0.0)
    run_dir = runs_dir / cfg.run_name
    res = _launch(runs_dir, tmp_path, cfg, run_dir)
    assert res.returncode == 0, res.stdout[-4000:]
    events = read_events(run_dir)
    assert [e["type"] for e in events].count("done") == 1 and events[-1]["output"] == "model"
    assert (run_dir / "model" / "tokenizer.json").exists()
