"""The waiting line: a run asked for while another trains waits its turn (position, expected wait from the running
run's ETA) and starts by itself; a queued run can leave the line; on a Space in demo mode the wall time stops a run.

The training process is a stand-in (a small script in place of `python -m engine train`) that writes the events a run
writes and trains until it is released or finds its STOP file: the line is about processes and files, not about
training, and these tests take a second each."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from engine.config import TrainConfig
from engine.errors import JobError
from engine.training import queue as waiting
from engine.training.jobs import JobManager
from engine.views.run_view import status_md
from engine.views.space_view import started_md

FAKE_TRAIN = """#!{python}
# stands in for `python -m engine train --config C --run-dir D [--resume]`
import json, pathlib, sys, time
run = pathlib.Path(sys.argv[sys.argv.index("--run-dir") + 1])
def event(**e):
    with open(run / "events.jsonl", "a") as fh:
        fh.write(json.dumps({{"time": time.time(), **e}}) + "\\n")
event(type="start", device_kind="cpu", resumed_from="checkpoint-1" if "--resume" in sys.argv else None)
event(type="progress", step=1, max_steps=10, loss=2.0, eta_s=40.0)
while not (run / "release").exists() and not (run / "STOP").exists():
    time.sleep(0.05)
if (run / "STOP").exists():
    event(type="stopped", step=1, checkpoint=None)
else:
    event(type="done", steps=10, output="model")
"""


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def fake_python(tmp_path) -> str:
    path = tmp_path / "fake-train"
    path.write_text(FAKE_TRAIN.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _cfg(name: str, **kw) -> TrainConfig:
    return TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=10, max_seq_len=72,
                       run_name=name, **kw)


def _release(runs: Path, name: str) -> None:
    (runs / name / "release").write_text("")


def test_a_second_run_waits_in_line_and_starts_by_itself(tmp_path, fake_python):
    runs = tmp_path / "runs"
    jobs = JobManager(runs, python=fake_python, queue=True, poll_s=0.05)
    first = jobs.start(_cfg("first"))
    _wait(lambda: jobs.status(first).last_progress is not None, 20, "the first run's progress")
    second, third = jobs.start(_cfg("second"), owner="b"), jobs.start(_cfg("third"), owner="c")
    s2, s3 = jobs.status(second), jobs.status(third)
    assert (s2.state, s2.queue_position, s2.queue_behind, s2.queue_device) == ("queued", 1, "first", "cpu")
    assert s3.queue_position == 2 and not s2.resumable
    assert 30 < s2.queue_wait_s <= 40  # the running run's ETA, counted down since its progress event
    assert s3.queue_wait_s is None  # no turn length outside a Space: the wait behind another queued run is unknown
    md = status_md(s2, "en")
    assert "Waiting in line: number **1**" in md and "'first' is training on this CPU now" in md and "GPU" not in md
    assert "na fila" in status_md(s2, "pt-BR") and "nesta CPU" in status_md(s2, "pt-BR")
    assert "waiting in line (number 2)" in started_md(jobs, third, "en")
    assert jobs.active() == "first"  # nothing else started
    _release(runs, first)
    _wait(lambda: jobs.status(second).state == "running", 20, "the second run to start")
    assert jobs.status(third).queue_position == 1
    _release(runs, second)
    _wait(lambda: jobs.status(third).state == "running", 20, "the third run to start")
    _release(runs, third)
    _wait(lambda: jobs.status(third).state == "finished", 20, "the third run to finish")
    assert [jobs.status(n).state for n in (first, second)] == ["finished", "finished"]


def test_a_queued_run_can_leave_the_line(tmp_path, fake_python):
    runs = tmp_path / "runs"
    jobs = JobManager(runs, python=fake_python, queue=True, poll_s=0.05)
    first = jobs.start(_cfg("first"))
    second = jobs.start(_cfg("second"))
    s = jobs.stop(second)
    # it never trained: no checkpoint, so Resume starts it again (restartable), and it is off the line
    assert s.state == "stopped" and s.restartable and not s.resumable and waiting.entry(runs / second) is None
    jobs.delete(second)
    _release(runs, first)
    _wait(lambda: jobs.status(first).state == "finished", 20, "the first run")


def test_stopping_a_queued_run_says_it_left_the_line_not_that_it_saves(tmp_path, fake_python):
    from engine.views.run_control import stop_run

    runs = tmp_path / "runs"
    jobs = JobManager(runs, python=fake_python, queue=True, poll_s=0.05)
    first = jobs.start(_cfg("first"), owner="a")
    second = jobs.start(_cfg("second"), owner="b")
    text = stop_run(jobs, second, "b", "en")
    assert "left the waiting line" in text and "checkpoint" not in text and "nothing was trained" in text
    assert jobs.status(second).state == "stopped" and jobs.status(first).state == "running"
    pt = stop_run(jobs, first, "a", "pt-BR")  # a running run: it saves a checkpoint first (the usual message)
    assert "checkpoint" in pt and "fila" not in pt
    _wait(lambda: jobs.status(first).state == "stopped", 20, "the first run to stop")


def test_a_resume_waits_in_line_too(tmp_path, fake_python):
    runs = tmp_path / "runs"
    jobs = JobManager(runs, python=fake_python, queue=True, poll_s=0.05)
    first = jobs.start(_cfg("first"))
    jobs.stop(first, wait=True)
    second = jobs.start(_cfg("second"))
    _wait(lambda: jobs.status(second).state == "running", 20, "the second run")
    assert jobs.resume(first) == first and jobs.status(first).state == "queued"
    _release(runs, second)
    _wait(lambda: jobs.status(first).state == "running", 20, "the resumed run")
    _release(runs, first)
    _wait(lambda: jobs.status(first).state == "finished", 20, "the resumed run to finish")


def test_without_a_line_a_second_run_is_refused_in_words_for_any_hardware(tmp_path, fake_python):
    runs = tmp_path / "runs"
    jobs = JobManager(runs, python=fake_python, queue=False)
    first = jobs.start(_cfg("first"))
    with pytest.raises(JobError) as err:
        jobs.start(_cfg("second"))
    assert "one job at a time" in str(err.value) and "GPU" not in str(err.value)
    assert "GPU" not in err.value.render("pt-BR")
    _release(runs, first)
    _wait(lambda: jobs.status(first).state == "finished", 20, "the first run")


def test_on_a_space_the_wall_time_stops_a_run_and_the_wait_counts_turns(tmp_path, fake_python, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/compact-llm-lab")
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    monkeypatch.setenv("COMPACT_LAB_SPACE_MAX_MINUTES", "0.02")  # 1.2 s
    for speed in ("COMPACT_LAB_SPACE_TRAIN_TOKENS_PER_S", "COMPACT_LAB_SPACE_GENERATED_TOKENS_PER_S"):  # a fast Space: the runs' counted
        monkeypatch.setenv(speed, "1e12")  # work fits the turn, so only the wall time (a fake run never ends) stops them
    runs = tmp_path / "runs"
    jobs = JobManager(runs, python=fake_python, poll_s=0.05)
    assert jobs.queue  # a Space in demo mode has a waiting line
    first = jobs.start(_cfg("first"))
    second, third = jobs.start(_cfg("second")), jobs.start(_cfg("third"))
    assert waiting.deadline_of(runs / first) is not None
    assert jobs.status(third).queue_wait_s is not None  # a turn is at most the wall time
    _wait(lambda: jobs.status(first).state == "stopped", 20, "the wall time to stop the first run")
    assert "time limit" in (runs / first / "STOP").read_text() or jobs.status(first).resumable
    _wait(lambda: jobs.status(third).state == "stopped", 30, "every run to have had its turn")
    assert jobs.status(second).state == "stopped"


def test_a_line_left_by_a_restarted_app_moves_on(tmp_path, fake_python):
    from engine.runs import save_config

    runs = tmp_path / "runs"
    (runs / "second").mkdir(parents=True)  # what an app that went away left on disk: a run waiting in line
    save_config(runs / "second", _cfg("second"))
    waiting.enqueue(runs / "second", resume=False)
    after = JobManager(runs, python=fake_python, queue=True, poll_s=0.05)  # the restarted app
    _wait(lambda: after.status("second").state == "running", 20, "the queued run to start after the restart")
    assert waiting.claim(runs / "second") is None  # already taken: nobody can start it twice
    _release(runs, "second")
    _wait(lambda: after.status("second").state == "finished", 20, "the run to finish")
