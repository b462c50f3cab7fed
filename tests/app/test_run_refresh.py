"""The Fine-tune panel's timer, its handler called directly (no browser): the first refresh sends the watched run, the
next ones only what changed, and the timer sleeps once a finished run has nothing new (each refresh costs a laptop's
browser CPU that the training needs) but keeps going while the run trains."""

from __future__ import annotations

import pytest

gr = pytest.importorskip("gradio")

from conftest import finish_run, stubborn_run  # noqa: E402

from engine.config import TrainConfig  # noqa: E402
from engine.training.jobs import JobManager  # noqa: E402
from ui import finetune_run  # noqa: E402


def _request() -> gr.Request:
    return gr.Request(headers={"accept-language": "en"}, session_hash="test-session")


def _tick(handlers, name, seen):
    out = handlers.on_tick(name, name, False, 0.0, seen, _request())
    parts, buttons, seen, timer = out[:8], out[8:13], out[13], out[14]  # buttons: try, resume, retry, delete, merge
    return parts, buttons, seen, timer


def _skipped(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def test_a_finished_run_is_sent_once_then_the_timer_sleeps(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    finish_run(run_dir, TrainConfig(run_name="r1", method="lora", base_model="builtin:compact-mini", dataset="builtin:dates"))
    handlers = finetune_run.run_handlers(JobManager(tmp_path))
    parts, buttons, seen, timer = _tick(handlers, "r1", None)
    assert not any(_skipped(p) for p in parts) and "r1" in parts[0]  # the status names the run
    assert timer.active
    parts, buttons, seen, timer = _tick(handlers, "r1", seen)
    assert all(_skipped(p) for p in parts) and not timer.active
    assert [b["visible"] for b in buttons] == [False, False, False, True, False]  # no model folder to try, finished: Delete only


def test_nothing_watched_sleeps_and_a_training_run_keeps_the_timer_going(tmp_path):
    handlers = finetune_run.run_handlers(JobManager(tmp_path))
    *_, timer = _tick(handlers, None, None)
    assert not timer.active
    proc = stubborn_run(tmp_path, "live", owner=None)
    try:
        _, _, seen, timer = _tick(handlers, "live", None)
        assert timer.active
        parts, _, seen, timer = _tick(handlers, "live", seen)
        assert all(_skipped(p) for p in parts) and timer.active  # nothing new yet, but it trains
    finally:
        proc.kill()
        proc.wait()
