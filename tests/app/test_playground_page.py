"""The playground as the page uses it, its handlers called directly (no browser, no model): an error keeps the
conversation and the prompt and shows beside them in the visitor's language; single-turn sends the new prompt only;
the greedy preset switches the sampling sliders off; "Try it" and the page load fill the newest run, its example
prompt and Compare's before/after pair."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from engine.config import GenerationSettings, TrainConfig  # noqa: E402
from engine.errors import ModelLoadError  # noqa: E402
from engine.fields import field_specs  # noqa: E402
from engine.runs import EventLog, save_config  # noqa: E402
from engine.training.jobs import JobManager  # noqa: E402
from engine.views import playground  # noqa: E402
from engine.views.playground_defaults import DATES_PROMPT  # noqa: E402
from engine.views.signals import StopSignals  # noqa: E402
from ui.playground import build_playground  # noqa: E402
from ui.playground_handlers import chat_handlers  # noqa: E402
from ui.playground_tabs import SAMPLING_ONLY  # noqa: E402

GEN_NAMES = [s.name for s in field_specs(GenerationSettings)]
GEN = [{"max_new_tokens": 4, "do_sample": False}.get(s.name, s.default) for s in field_specs(GenerationSettings)]
HISTORY = [{"role": "user", "content": DATES_PROMPT}, {"role": "assistant", "content": "2023-09-05"}]


def _request(lang: str = "pt-BR") -> gr.Request:
    return gr.Request(headers={"accept-language": lang}, session_hash="test-session")


def _upd(text: str, done: bool = False) -> SimpleNamespace:
    return SimpleNamespace(text=text, ttft=0.1, n_tokens=2, tokens_per_s=10.0, done=done, peak_gib=None, finish_reason="eos" if done else None, notes=[])


def _send(h, prompt: str, history: list, *, keep: bool = False, lang: str = "pt-BR", regenerate: bool = False) -> list[tuple]:
    handler = h.page_regenerate if regenerate else h.page_send
    return list(handler(_request(lang), "run:dates", "none", "chat", "", prompt, history, keep, *GEN))


def test_a_failed_load_keeps_the_conversation_and_the_prompt():
    def load(ref, quant, extra):
        raise ModelLoadError(key="playground.error.unknown_run", run="'ghost'")

    h = chat_handlers(load, GEN_NAMES, StopSignals())
    (chat, prompt, stats, _info, notice), = _send(h, "Converta a data 01/02/2003 para o formato ISO (AAAA-MM-DD).", HISTORY)
    assert chat == HISTORY and prompt.startswith("Converta a data 01/02/2003") and stats == ""
    assert notice.startswith("⚠") and "Não existe execução chamada 'ghost'" in notice
    (_c, _p, _s, _i, notice), = _send(h, "   ", HISTORY, lang="en")
    assert "Type a prompt first." in notice  # checked before anything loads
    (chat, _p, _s, _i, notice), = _send(h, "", [], regenerate=True)
    assert chat == [] and "Ainda não há o que gerar de novo" in notice


def test_a_generation_that_fails_midway_gives_the_conversation_back(monkeypatch):
    import engine.inference.generate as generate

    def broken(loaded, request, settings, *, chat, stop_event):
        yield _upd("20")
        raise RuntimeError("the GPU fell off")

    monkeypatch.setattr(generate, "stream_generate", broken)
    monkeypatch.setattr(playground, "model_info", lambda loaded, lang: "info")
    h = chat_handlers(lambda *a: object(), GEN_NAMES, StopSignals())
    outs = _send(h, "next question", HISTORY, lang="en")
    assert outs[-2][0][-1]["content"] == "20"  # it streamed...
    chat, prompt, _stats, _info, notice = outs[-1]
    assert chat == HISTORY and prompt == "next question"  # ...then the screen is as it was before the click
    assert "Unexpected error (RuntimeError)" in notice and "fell off" not in notice


def test_single_turn_sends_only_the_new_prompt_and_keeps_the_earlier_turns_on_screen(monkeypatch):
    import engine.inference.generate as generate

    seen = []

    def fake(loaded, request, settings, *, chat, stop_event):
        seen.append(request)
        yield _upd("2003-02-01", done=True)

    monkeypatch.setattr(generate, "stream_generate", fake)
    monkeypatch.setattr(playground, "model_info", lambda loaded, lang: "info")
    h = chat_handlers(lambda *a: object(), GEN_NAMES, StopSignals())
    chat, prompt, stats, _info, notice = _send(h, "Converta a data 01/02/2003 para o formato ISO (AAAA-MM-DD).", HISTORY, keep=False)[-1]
    assert seen[-1] == [{"role": "user", "content": "Converta a data 01/02/2003 para o formato ISO (AAAA-MM-DD)."}]
    assert chat[:2] == HISTORY and chat[-1]["content"] == "2003-02-01" and prompt == "" and notice == ""
    assert "tokens/s" in stats and "o modelo concluiu a resposta" in stats
    _send(h, "and the next?", HISTORY, keep=True)
    assert seen[-1][:2] == HISTORY  # kept: the model reads the conversation


def test_greedy_switches_the_sampling_sliders_off_and_sampling_back_on():
    h = chat_handlers(lambda *a: None, GEN_NAMES, StopSignals())
    out = h.on_preset(_request("en"), "precise", *GEN)
    by_name = dict(zip(GEN_NAMES, out, strict=False))
    assert by_name["do_sample"]["value"] is False
    assert all(by_name[n]["interactive"] is False for n in SAMPLING_ONLY)
    assert "repetition_penalty" in by_name and "interactive" not in by_name["repetition_penalty"]  # penalties still apply
    assert out[-1]["visible"] is True and "Greedy" in out[-2]
    out = h.on_preset(_request("pt-BR"), "balanced", *GEN)
    assert all(dict(zip(GEN_NAMES, out, strict=False))[n]["interactive"] is True for n in SAMPLING_ONLY)
    assert out[-1]["visible"] is False and "Amostragem moderada" in out[-2]
    assert [u["interactive"] for u in h.on_sampling(False)[:-1]] == [False] * len(SAMPLING_ONLY)


def _finished_run(runs: Path, name: str, ended: float, **cfg) -> None:
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    save_config(run_dir, TrainConfig(**{"method": "lora", "base_model": "builtin:compact-mini", "dataset": "builtin:dates", **cfg}))
    log = EventLog(run_dir / "events.jsonl")
    log.write("start", time=time.time() - ended - 60, run=name)
    log.write("done", time=time.time() - ended, output="adapter", steps=2)


def _updates(outputs: list, values: list) -> dict:
    assert len(outputs) == len(values)
    return {id(c): v for c, v in zip(outputs, values, strict=True)}


def test_the_page_opens_on_the_newest_run_and_try_it_fills_a_run(tmp_path):
    runs = tmp_path
    _finished_run(runs, "chat-run", ended=300, dataset="builtin:instructions")
    _finished_run(runs, "dates-run", ended=10)
    with gr.Blocks():
        pg = build_playground(JobManager(runs))
    by_id = {c.elem_id: c for c in pg["try_outputs"] if getattr(c, "elem_id", None)}
    # as built: no run (the page is built once for every visitor, engine/run_access.py); the runs come at load
    assert by_id["playground-model"].value == "builtin:compact-mini" and by_id["playground-model-b"].value == "builtin:compact-mini-dates"
    assert not any("run:" in str(c.value) for c in pg["try_outputs"] if hasattr(c, "value"))
    assert pg["model_a"] is by_id["playground-model-a"] and pg["lists"][0] is pg["model"]

    got = _updates(pg["try_outputs"], pg["try_it"]("chat-run", "pt-BR"))
    assert got[id(by_id["playground-model"])]["value"] == "run:chat-run"
    assert got[id(by_id["playground-prompt"])]["value"] == "O que é um modelo de linguagem?"
    assert got[id(by_id["playground-keep"])]["value"] is True and got[id(by_id["playground-chat"])] == []
    assert got[id(by_id["playground-preset"])]["value"] == "balanced"
    assert got[id(by_id["playground-model-a"])]["value"] == "builtin:compact-mini" and got[id(by_id["playground-model-b"])]["value"] == "run:chat-run"
    assert "antes do treino" in got[id(by_id["playground-compare-note"])]

    load = _updates(pg["load_outputs"], pg["on_load"](_request("pt-BR")))
    assert load[id(by_id["playground-model"])]["value"] == "run:dates-run"
    assert load[id(by_id["playground-prompt"])]["value"] == DATES_PROMPT and load[id(by_id["playground-keep"])]["value"] is False
    assert load[id(by_id["playground-preset"])]["value"] == "precise"
    assert load[id(by_id["playground-model-a"])]["value"] == "builtin:compact-mini" and load[id(by_id["playground-model-b"])]["value"] == "run:dates-run"
    tabs = [v for v in load.values() if isinstance(v, gr.Tab)]
    assert [t.label for t in tabs] == ["Chat", "Comparar", "Em lote", "Avaliar", "Exportar (ONNX)"]
    tables = [v["value"]["headers"] for v in load.values() if isinstance(v, dict) and isinstance(v.get("value"), dict)]
    assert ["modelo", "métrica", "valor", "detalhes"] in tables


def test_without_runs_the_page_opens_on_the_builtin_model_and_compare_shows_the_shipped_example(tmp_path):
    with gr.Blocks():
        pg = build_playground(JobManager(tmp_path))
    by_id = {c.elem_id: c for c in pg["try_outputs"] if getattr(c, "elem_id", None)}
    # before any run of one's own, Compare is the built-in model before and after the first run's fine-tune (shipped)
    assert by_id["playground-model"].value == "builtin:compact-mini" and by_id["playground-model-b"].value == "builtin:compact-mini-dates"
    assert by_id["playground-prompt"].value == "Explain in two sentences what a language model is."
    assert "before training" in by_id["playground-compare-note"].value
    assert not any("/" in str(c.value) for c in (by_id["playground-model"], by_id["playground-model-a"]))  # never a Hub model
