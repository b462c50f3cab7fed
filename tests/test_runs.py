"""Run folders: atomic writes, torn event lines, checkpoint completeness, run summaries."""

import json

import pytest

from engine.config import TrainConfig
from engine.errors import ConfigError, JobError
from engine.runs import (
    EventLog,
    atomic_write_text,
    discard_incomplete_checkpoints,
    last_complete_checkpoint,
    load_config,
    read_events,
    run_path,
    save_config,
    summarize,
)


def test_run_path_refuses_escapes(tmp_path):
    assert run_path(tmp_path, "lora-1").parent == tmp_path
    for bad in ("../x", "/etc", "a/b", "", ".hidden", "..", "a..b"):
        with pytest.raises(JobError):
            run_path(tmp_path, bad)


def test_atomic_write_leaves_no_temp(tmp_path):
    atomic_write_text(tmp_path / "f.txt", "hello")
    assert (tmp_path / "f.txt").read_text() == "hello"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_config_round_trip_and_bad_yaml(tmp_path):
    cfg = TrainConfig(method="qlora", learning_rate=1e-4)
    save_config(tmp_path, cfg)
    assert load_config(tmp_path / "config.yaml") == cfg
    (tmp_path / "bad.yaml").write_text("method: [unclosed")
    with pytest.raises(ConfigError, match="valid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "bad2.yaml").write_text("learning_rate: -3\n")
    with pytest.raises(ConfigError, match="learning_rate"):
        load_config(tmp_path / "bad2.yaml")


def test_torn_last_event_line_is_ignored(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.write("start")
    log.write("progress", step=1, max_steps=10, loss=2.0)
    with open(tmp_path / "events.jsonl", "a") as fh:
        fh.write('{"type": "progress", "st')
    events = read_events(tmp_path)
    assert [e["type"] for e in events] == ["start", "progress"]


def _ckpt(run, step, complete=True):
    d = run / f"checkpoint-{step}"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"x")
    if complete:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return d


def test_half_written_checkpoint_is_never_taken(tmp_path):
    _ckpt(tmp_path, 10)
    _ckpt(tmp_path, 20)
    torn = _ckpt(tmp_path, 30, complete=False)
    (torn / "trainer_state.json").write_text('{"global_st')  # killed mid-write
    assert last_complete_checkpoint(tmp_path).name == "checkpoint-20"
    assert discard_incomplete_checkpoints(tmp_path) == ["checkpoint-30"]
    assert not torn.exists()


def test_summary_states(tmp_path):
    save_config(tmp_path, TrainConfig())
    log = EventLog(tmp_path / "events.jsonl")
    log.write("start")
    log.write("progress", step=5, max_steps=10, loss=1.5, mem_gib=0.5)
    log.write("eval", step=5, eval_loss=1.7)
    assert summarize(tmp_path, alive=True).state == "running"
    s = summarize(tmp_path, alive=False)
    # no checkpoint: it cannot be resumed, only started again
    assert s.state == "killed" and not s.resumable and s.restartable and s.best_eval_loss == 1.7 and s.step == 5
    _ckpt(tmp_path, 5)
    assert summarize(tmp_path, alive=False).resumable and not summarize(tmp_path, alive=False).restartable
    log.write("stopped", step=5)
    assert summarize(tmp_path, alive=False).state == "stopped"
    log.write("start")
    log.write("done", output="adapter", peak_gib=0.6)
    s = summarize(tmp_path, alive=False)
    assert s.state == "finished" and s.output == "adapter" and not s.resumable
    log.write("start")
    log.write("error", message="boom")
    s = summarize(tmp_path, alive=False)
    assert s.state == "failed" and s.error == "boom"
