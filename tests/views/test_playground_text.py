"""The playground's text without gradio: requests, a chat turn and a comparison as they stream, the stats line,
regenerate, the batch line and the evaluation labels."""

from __future__ import annotations

import copy
import threading
from types import SimpleNamespace

import pytest

from engine.config import GenerationSettings
from engine.errors import GenerationError
from engine.fields import field_specs
from engine.views.choices import NO_ADAPTER
from engine.views.playground import (
    batch_line,
    chat_turn,
    compare_settings,
    compare_turns,
    drop_last_turn,
    evaluation_rows,
    generation_request,
    model_label,
    preset_values,
    prompt_settings,
    side_extra,
    split_gen_values,
    stats_line,
)


def _upd(**kw):
    return SimpleNamespace(**{"text": "", "ttft": 0.5, "n_tokens": 3, "tokens_per_s": 12.34, "done": False, "peak_gib": None, "finish_reason": None,
                              "notes": [], **kw})


def test_stats_line():
    assert stats_line(_upd(ttft=None)) == "generating…"
    assert stats_line(_upd()) == "3 tokens · 12.3 tokens/s · first token after 0.50 s"
    done = stats_line(_upd(done=True, peak_gib=1.234, finish_reason="eos", notes=["a", "b"]))
    assert done.endswith(" · peak memory 1.23 GiB · ended: the model finished its answer · a; b")


def test_stats_line_in_portuguese_with_numbers_for_people():
    from engine.inference.notes import Note

    assert stats_line(_upd(ttft=None), "pt-BR") == "gerando…"
    note = Note("playground.note.max_new_lowered", old=500, new=40, ctx=64, used=24)
    done = stats_line(_upd(n_tokens=1234, done=True, peak_gib=1.234, finish_reason="stopped", notes=[note]), "pt-BR")
    assert done.startswith("1.234 tokens · 12,3 tokens/s · primeiro token após 0,50 s · pico de memória 1,23 GiB · fim: interrompido")
    assert done.endswith("max_new_tokens reduzido de 500 para 40: o contexto do modelo tem 64 tokens e o prompt usa 24.")
    assert str(note).startswith("max_new_tokens lowered from 500")  # the CLI (English) still reads it as text


def test_request_in_chat_and_completion_modes():
    past = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert generation_request("chat", "  ", past, "next") == past + [{"role": "user", "content": "next"}]
    assert generation_request("chat", "be brief", [], "q")[0] == {"role": "system", "content": "be brief"}
    assert generation_request("completion", "ignored", past, "raw text") == "raw text"


def test_regenerate_drops_the_last_answer_and_returns_its_prompt():
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
               {"role": "user", "content": [{"type": "text", "text": "multi"}, {"type": "text", "text": "part"}]}, {"role": "assistant", "content": "x"}]
    rest, text = drop_last_turn(history)
    assert rest == history[:2] and text == "multi part"
    assert drop_last_turn([]) is None and drop_last_turn(None) is None and drop_last_turn([{"role": "assistant", "content": "x"}]) is None


def test_chat_turn_streams_the_answer_into_the_conversation(monkeypatch):
    import engine.inference.generate as generate

    seen = {}

    def fake_stream(loaded, request, settings, *, chat, stop_event):
        seen.update(request=request, chat=chat)
        yield _upd(text="Hel", ttft=None)
        yield _upd(text="Hello", done=True)

    monkeypatch.setattr(generate, "stream_generate", fake_stream)
    # the same conversation list is updated in place as the answer grows (gradio sends it at each yield): copy it as it comes
    turns = [copy.deepcopy(t) for t in chat_turn(object(), "chat", "", [], "hi", GenerationSettings(), threading.Event())]
    assert turns[0] == ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}], "generating…")
    assert turns[-1][0][-1]["content"] == "Hello" and turns[-1][1].startswith("3 tokens")
    assert seen == {"request": [{"role": "user", "content": "hi"}], "chat": True}


def test_compare_loads_one_side_after_the_other_and_stops(monkeypatch):
    import engine.inference.generate as generate

    monkeypatch.setattr(generate, "stream_generate", lambda loaded, *a, **k: iter([_upd(text=f"answer of {loaded}")]))
    loads = []

    def load_side(side, ref):
        loads.append((side, ref))
        return ref

    out = list(compare_turns(load_side, ("A", "B"), "p", GenerationSettings(), chat=False, stop_event=threading.Event()))
    assert loads == [(0, "A"), (1, "B")]
    assert out[0] == ("", "loading A…", "", "") and out[-1][0] == "answer of A" and out[-1][2] == "answer of B"
    stopped = threading.Event()
    stopped.set()
    assert list(compare_turns(load_side, ("A", "B"), "p", GenerationSettings(), chat=False, stop_event=stopped)) == []


@pytest.mark.parametrize(("finished", "stopped", "end"), [(False, False, "0.5s"), (True, False, " · done"), (False, True, " · stopped")])
def test_batch_line(finished, stopped, end):
    prog = SimpleNamespace(done=2, total=4, micro_batch=2, elapsed=0.5, notes=["halved after OOM"], finished=finished, stopped=stopped)
    line = batch_line(prog)
    assert line.startswith("2/4 prompts · micro batch 2 · 0.5 s · halved after OOM") and line.endswith(end if end != "0.5s" else "OOM")
    assert batch_line(prog, "pt-BR").startswith("2/4 prompts · micro-batch 2 · 0,5 s")


def test_the_adapter_goes_on_model_a_only():
    extra = ("run:lora-a", "one device", 0)
    assert side_extra(extra, 0) == extra and side_extra(extra, 1) == (NO_ADAPTER, "one device", 0)
    assert model_label("builtin:compact-mini", extra) == "builtin:compact-mini + adapter run:lora-a"
    assert model_label("m", side_extra(extra, 1)) == "m" and model_label("m", ()) == "m"


GEN_NAMES = [s.name for s in field_specs(GenerationSettings)]


def _gen_vals(**over) -> tuple:
    return tuple(over.get(n, s.default) for n, s in ((s.name, s) for s in field_specs(GenerationSettings)))


def test_split_gen_values_and_an_empty_prompt():
    vals = _gen_vals(max_new_tokens=7)
    settings, extra = split_gen_values(GEN_NAMES, vals + ("run:a", "one device", 0))
    assert settings.max_new_tokens == 7 and extra == ("run:a", "one device", 0)
    assert split_gen_values(GEN_NAMES, vals)[1] == ()
    assert prompt_settings(GEN_NAMES, vals, "hi") == split_gen_values(GEN_NAMES, vals)
    for empty in ("", "  \n", None):
        with pytest.raises(GenerationError, match="Type a prompt first."):
            prompt_settings(GEN_NAMES, vals, empty)


def test_compare_settings_fix_a_random_seed_only_when_sampling():
    sampled = split_gen_values(GEN_NAMES, _gen_vals(do_sample=True, seed=0))[0]
    assert compare_settings(sampled).seed == 1234
    for kept in (split_gen_values(GEN_NAMES, _gen_vals(do_sample=True, seed=7))[0], split_gen_values(GEN_NAMES, _gen_vals(do_sample=False, seed=0))[0]):
        assert compare_settings(kept) == kept


def test_preset_values_follow_the_field_names():
    from engine.inference.presets import apply_preset, generation_presets

    name = next(iter(generation_presets()))
    current = GenerationSettings()
    new = apply_preset(name, current)
    assert preset_values(name, current, GEN_NAMES) == [getattr(new, n) for n in GEN_NAMES]


def test_evaluation_rows_load_each_side_in_turn_with_the_adapter_on_a_only(monkeypatch):
    import engine.views.playground as pg

    loads = []
    monkeypatch.setattr(pg, "evaluation_row", lambda kind, loaded, label, text, dataset, window, stride, lang: [label, kind, loaded, text, dataset, window, stride])
    extra = ("run:lora-a", "one device", 0)
    rows = evaluation_rows("ppl", lambda ref, ex: loads.append((ref, ex)) or f"loaded {ref}", ["a", "b"], extra, "t", "builtin:corpus", 0, 0)
    assert loads == [("a", extra), ("b", (NO_ADAPTER, "one device", 0))]
    assert rows == [["a + adapter run:lora-a", "ppl", "loaded a", "t", "builtin:corpus", 0, 0], ["b", "ppl", "loaded b", "t", "builtin:corpus", 0, 0]]
