"""What the Playground starts with (engine/views/playground_defaults.py) and how fast a Hub model fails offline
(engine/models/hub_access.py), without gradio and without loading a model: the default model with and without
finished runs, Compare's before/after pair, the example prompt and single-turn default of each kind of run, the
messages in Portuguese."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.config import TrainConfig
from engine.errors import EngineError, GenerationError, ModelLoadError
from engine.models import hub_access
from engine.runs import EventLog, save_config
from engine.training.jobs import JobManager
from engine.views import playground_defaults as pd
from engine.views.playground import prompt_settings
from engine.views.playground_load import load_for_playground


def _run(runs: Path, name: str, *, ended: float, state: str = "done", scores: tuple[float, float] | None = None, **cfg) -> None:
    """A run folder as a real run leaves it: its config.yaml and start/terminal events (`ended` seconds ago), and its
    date-task scores before and after training when given."""
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    save_config(run_dir, TrainConfig(**{"method": "lora", "base_model": "builtin:compact-mini", "dataset": "builtin:dates", **cfg}))
    log = EventLog(run_dir / "events.jsonl")
    now = time.time()
    log.write("start", time=now - ended - 60, run=name)
    for when, accuracy in zip(("before", "after"), scores or (), strict=False):
        log.write("task_score", time=now - ended - 30, when=when, accuracy=accuracy, correct=round(accuracy * 100), total=100)
    if state == "done":
        log.write("done", time=now - ended, output="adapter", steps=2)
    elif state == "error":
        log.write("error", time=now - ended, message="boom", kind="crash")


def test_without_finished_runs_the_builtin_model_is_the_default(tmp_path):
    jobs = JobManager(tmp_path)
    _run(tmp_path, "crashed", ended=1, state="error")  # a failed run is never a default
    assert pd.default_model(jobs) == "builtin:compact-mini"
    # Compare opens on the shipped fine-tuned example and its base: before/after before any run of one's own
    assert pd.compare_pair(jobs) == ("builtin:compact-mini", "builtin:compact-mini-dates")
    assert "before training" in pd.compare_note(tmp_path, *pd.compare_pair(jobs), "en")
    example = pd.start_for(tmp_path, "builtin:compact-mini-dates", "en")
    assert example.example == pd.DATES_PROMPT and not example.keep and example.preset == "precise"
    start = pd.start_for(tmp_path, pd.default_model(jobs), "pt-BR")
    assert start.example == "Explique em duas frases o que é um modelo de linguagem." and start.keep and start.mode == "chat"
    assert pd.start_for(tmp_path, "Qwen/Qwen2.5-0.5B-Instruct", "en").example == "Explain in two sentences what a language model is."


def test_the_newest_finished_run_is_the_default_and_compare_is_its_base_before_and_after(tmp_path):
    jobs = JobManager(tmp_path)
    _run(tmp_path, "older", ended=500)
    _run(tmp_path, "newest", ended=10, base_model="builtin:compact-mini")
    _run(tmp_path, "failed-later", ended=1, state="error")
    (tmp_path / "older" / "merged").mkdir()  # touching an older run (a merge) does not make it the newest
    assert pd.default_model(jobs) == "run:newest"
    assert pd.compare_pair(jobs) == ("builtin:compact-mini", "run:newest")
    assert "before training" in pd.compare_note(tmp_path, "builtin:compact-mini", "run:newest", "en")
    assert "antes do treino" in pd.compare_note(tmp_path, "builtin:compact-mini", "run:newest", "pt-BR")
    assert "before" not in pd.compare_note(tmp_path, "run:older", "run:newest", "en")  # not its base: no claim
    assert "Finish a fine-tune run" in pd.compare_note(tmp_path, "builtin:compact-mini", None, "en")


def test_the_page_opens_on_the_newest_run_that_learned_not_a_newer_one_that_did_not(tmp_path):
    jobs = JobManager(tmp_path)
    _run(tmp_path, "learned", ended=500, scores=(0.0, 0.89))
    _run(tmp_path, "gibberish", ended=10, scores=(0.0, 0.0))  # newer, but its date score never rose
    _run(tmp_path, "worse", ended=5, scores=(0.3, 0.2))
    assert pd.default_model(jobs) == "run:learned"
    assert pd.compare_pair(jobs) == ("builtin:compact-mini", "run:learned")  # Compare shows the same run, before and after
    _run(tmp_path, "chat-data", ended=1, dataset="builtin:instructions")  # not scored: nothing says it failed
    assert pd.default_model(jobs) == "run:chat-data"


def test_when_no_run_learned_the_page_opens_on_the_builtin_model(tmp_path):
    jobs = JobManager(tmp_path)
    _run(tmp_path, "gibberish", ended=10, scores=(0.0, 0.0))
    assert pd.default_model(jobs) == "builtin:compact-mini"


def test_a_date_run_is_single_turn_greedy_with_the_date_prompt(tmp_path):
    _run(tmp_path, "dates", ended=5)
    for ref in ("run:dates", "run:dates/merged"):
        start = pd.start_for(tmp_path, ref, "en")
        assert start.example == "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD)."
        assert (start.keep, start.mode, start.preset, start.style) == (False, "chat", "precise", "task")


def test_an_instruction_run_keeps_the_conversation_and_shows_a_row_of_its_data(tmp_path):
    _run(tmp_path, "chatty", ended=5, dataset="builtin:instructions")
    start = pd.start_for(tmp_path, "run:chatty", "en")
    assert start.example == "O que é um modelo de linguagem?"  # the first row of its data
    assert (start.keep, start.mode, start.preset, start.style) == (True, "chat", "balanced", "instruction")


def test_an_uploaded_task_file_and_its_eval_file(tmp_path):
    data = tmp_path / "_uploads" / "labels.csv"
    data.parent.mkdir()
    data.write_text("question,answer\nIs 7 prime?,yes\nIs 8 prime?,no\n", encoding="utf-8")
    evals = data.with_name("held-out.jsonl")
    evals.write_text('{"instruction": "Is 11 prime?", "output": "yes"}\n', encoding="utf-8")
    _run(tmp_path, "labels", ended=5, dataset=str(data), columns="instruction=question, output=answer")
    start = pd.start_for(tmp_path, "run:labels", "en")
    assert (start.example, start.keep, start.style) == ("Is 7 prime?", False, "task")  # short answers: a task, one prompt at a time
    _run(tmp_path, "labels-eval", ended=4, dataset=str(data), columns="instruction=question, output=answer", eval_dataset=str(evals))
    assert pd.start_for(tmp_path, "run:labels-eval", "en").example == "Is 11 prime?"  # the eval data comes first
    data.unlink()  # the upload is gone: a neutral prompt, never an error
    assert pd.start_for(tmp_path, "run:labels", "pt-BR").example == pd.neutral_prompt("pt-BR")


def test_a_run_on_plain_text_continues_text(tmp_path):
    _run(tmp_path, "scratch", ended=5, method="scratch", dataset="builtin:corpus")
    start = pd.start_for(tmp_path, "run:scratch", "en")
    assert start.mode == "completion" and not start.keep and 0 < len(start.example.split()) <= pd.TEXT_EXAMPLE_WORDS


def test_a_hub_model_offline_fails_at_once_with_a_message(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError) as err:
        load_for_playground(JobManager(tmp_path), "someone/not-downloaded-model", "none")
    assert time.perf_counter() - t0 < 2
    assert "offline" in str(err.value) and "not in the local Hugging Face cache" in str(err.value)
    assert "não está no cache local" in err.value.render("pt-BR")


def test_a_hub_model_without_network_fails_at_once_and_a_cached_one_loads_from_the_cache(monkeypatch):
    import socket

    with socket.socket() as sock:  # a port nobody listens on: the connection is refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(hub_access, "offline_mode", lambda: False)
    monkeypatch.setattr(hub_access, "hub_address", lambda: ("127.0.0.1", port))
    hub_access.forget_probe()
    try:
        t0 = time.perf_counter()
        with pytest.raises(ModelLoadError, match="cannot be reached"):
            hub_access.check_hub_model("someone/not-downloaded-model")
        assert time.perf_counter() - t0 < 2
        monkeypatch.setattr(hub_access, "in_local_cache", lambda repo: True)
        assert hub_access.check_hub_model("someone/downloaded-model") is True  # load it from the cache, no request
    finally:
        hub_access.forget_probe()


def test_offline_while_switches_offline_mode_for_one_load_only():
    import huggingface_hub.constants as constants

    before = constants.HF_HUB_OFFLINE
    with hub_access.offline_while(True):
        assert constants.is_offline_mode()
        with hub_access.offline_while(True):
            assert constants.HF_HUB_OFFLINE
        assert constants.HF_HUB_OFFLINE
    assert constants.HF_HUB_OFFLINE == before
    with hub_access.offline_while(False):
        assert constants.HF_HUB_OFFLINE == before


def test_generation_and_loading_errors_in_portuguese(tmp_path):
    with pytest.raises(GenerationError) as err:
        prompt_settings([], (), "  ")
    assert str(err.value) == "Type a prompt first." and err.value.render("pt-BR") == "Digite um prompt primeiro."
    jobs = JobManager(tmp_path)
    with pytest.raises(ModelLoadError) as err:
        load_for_playground(jobs, "run:ghost", "none")
    assert "no run named 'ghost'" in str(err.value) and "Não existe execução chamada 'ghost'" in err.value.render("pt-BR")
    assert str(tmp_path) not in str(err.value)  # never the server's folders
    with pytest.raises(EngineError) as err:
        load_for_playground(jobs, "", "none")
    assert "Nenhum modelo escolhido" in err.value.render("pt-BR")
    with pytest.raises(ModelLoadError) as err:
        load_for_playground(jobs, "builtin:compact-course", "none")  # not shipped, not pretrained in this empty runs folder
    assert "ainda não foi pré-treinado" in err.value.render("pt-BR") and "prepare-builtin compact-course" in err.value.render("pt-BR")
