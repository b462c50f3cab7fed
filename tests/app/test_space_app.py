"""The app started exactly as a Hugging Face Space starts it (`python app.py` with SPACE_ID, SPACE_HOST and
GRADIO_SERVER_NAME=0.0.0.0 in its environment), seen through its API (gradio_client) by two visitors: the Space's
notice (limits, the storage warning, the duplicate link), an oversized run refused naming the limit, and a second
visitor's run waiting in line (its position, the expected wait, wording for a CPU) and then starting by itself."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("gradio")
from gradio_client import Client  # noqa: E402

from engine.config import TrainConfig  # noqa: E402
from engine.fields import field_specs  # noqa: E402
from engine.training.jobs import JobManager  # noqa: E402
from engine.views.finetune_form import FT_DATA, FT_DEFAULTS, FT_LORA, FT_MAIN, FT_RUN, FT_TRAIN  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FT_NAMES = FT_MAIN + FT_TRAIN + FT_LORA + FT_RUN + FT_DATA


def _form(**overrides) -> list:
    values = {**{s.name: s.default for s in field_specs(TrainConfig)}, **FT_DEFAULTS, **overrides}
    return [None, *[values[n] for n in FT_NAMES], None]  # the dataset upload, the fields, the eval upload


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def space_app(tmp_path_factory):
    runs = tmp_path_factory.mktemp("space-runs")
    port = _free_port()
    env = {**os.environ, "SPACE_ID": "someone/compact-llm-lab", "SPACE_HOST": "someone-compact-llm-lab.hf.space",
           "GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": str(port), "COMPACT_LAB_RUNS": str(runs), "HF_HUB_OFFLINE": "1",
           "GRADIO_SSR_MODE": "False", "PYTHONUNBUFFERED": "1"}
    env.pop("COMPACT_LAB_SHARED", None)
    log = open(runs.parent / "space-app.log", "w")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail("the app exited: " + (runs.parent / "space-app.log").read_text()[-3000:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    try:
        yield url, runs, runs.parent / "space-app.log"
    finally:
        jobs = JobManager(runs, queue=False)
        for s in jobs.list_runs():
            if s.state == "running":
                jobs.kill(s.name)
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_the_space_says_its_limits_storage_and_duplicate_link(space_app):
    url, _runs, log = space_app
    printed = log.read_text()
    assert "a Hugging Face Space (someone/compact-llm-lab)" in printed and "Device: CPU" in printed
    notice = Client(url, verbose=False).predict(api_name="/space_notice")
    assert "at most 600 steps, 3 epochs, sequences of 256 tokens" in notice and "15 minutes" in notice
    assert "disappear when it restarts" in notice and "download yours (Fine-tune → Download and export → Download run (zip))" in notice
    assert "[Duplicate this Space](https://huggingface.co/spaces/someone/compact-llm-lab?duplicate=true)" in notice
    pt = Client(url, verbose=False, headers={"Accept-Language": "pt-BR,pt;q=0.9"}).predict(api_name="/space_notice")
    assert "no máximo 600 passos" in pt and "somem quando ele reinicia" in pt


def test_an_oversized_run_is_refused_naming_the_limit(space_app):
    url, runs, _log = space_app
    visitor = Client(url, verbose=False)
    with pytest.raises(Exception, match="at most 600 steps per run.*COMPACT_LAB_SPACE_MAX_STEPS"):
        visitor.predict(*_form(max_steps=10_000_000, run_name="greedy"), api_name="/start_training")
    with pytest.raises(Exception, match="at most 3 epochs per run"):
        visitor.predict(*_form(max_steps=0, epochs=1000, run_name="greedy"), api_name="/start_training")
    assert not (runs / "greedy").exists()  # refused before anything was made
    # the prediction under Start says so before the click, instead of "fits"
    said = visitor.predict(*_form(max_steps=10_000_000), api_name="/predict_memory")
    assert "This Space will refuse this run at Start" in said and "at most 600 steps" in said and "fits" not in said
    assert "fits" in visitor.predict(*_form(), api_name="/predict_memory")  # the first run: within the limits


def test_a_second_visitor_waits_in_line_then_starts(space_app):
    url, runs, _log = space_app
    first, second = Client(url, verbose=False), Client(url, verbose=False)
    assert first.predict(*_form(max_steps=300, run_name="visitor-a"), api_name="/start_training")["value"] == "visitor-a"
    assert second.predict(*_form(max_steps=300, run_name="visitor-b"), api_name="/start_training")["value"] == "visitor-b"
    status = second.predict("visitor-b", api_name="/run_status")
    assert "waiting in line" in status and "number **1**" in status and "one run at a time" in status
    assert "GPU" not in status and "out of memory" not in status
    pt = Client(url, verbose=False, headers={"Accept-Language": "pt-BR"}).predict("visitor-b", api_name="/run_status")
    assert "Esperando na fila: número **1**" in pt
    with pytest.raises(Exception, match="only that browser can delete it"):  # a visitor cannot jump the line
        second.predict("visitor-a", api_name="/delete_run")
    first.predict(api_name="/stop_training")  # the first visitor stops: the line moves on by itself
    jobs = JobManager(runs, queue=False)
    deadline = time.time() + 120
    while time.time() < deadline and jobs.status("visitor-b").state == "queued":
        time.sleep(0.5)
    assert jobs.status("visitor-b").state == "running"
    # its memory prediction is recorded beside the measured peak (the estimator's gate takes no server path on a Space:
    # the run names its model by reference), so the run's memory line has a number, not "—"
    events, deadline = runs / "visitor-b" / "events.jsonl", time.time() + 180
    while time.time() < deadline and not (events.exists() and '"type": "memory"' in events.read_text()):
        time.sleep(0.5)
    memory = [json.loads(line) for line in events.read_text().splitlines() if '"type": "memory"' in line]
    assert memory and memory[0]["predicted_gib"] > 0
    second.predict(api_name="/stop_training")

