"""Tests for engine/inference/generate.py: streaming, stopping, context limits, chat formatting (CPU, offline)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import CPU, tiny_model_dir

from engine.config import GenerationSettings, QuantSettings
from engine.errors import GenerationError
from engine.inference.decoding import end_token_ids, flatten_content, merged_stop_strings
from engine.inference.generate import generate_text, stream_generate
from engine.inference.presets import apply_preset, generation_presets
from engine.models.loading import LoadedModel, load_model

GREEDY = GenerationSettings(max_new_tokens=40, do_sample=False, repetition_penalty=1.0)


@pytest.fixture(scope="module")
def tiny_dir() -> Path:
    return tiny_model_dir()


@pytest.fixture(scope="module")
def loaded(tiny_dir) -> LoadedModel:
    return load_model(str(tiny_dir), runs_dir=tiny_dir.parent, device=CPU, allow_local_paths=True)


@pytest.fixture()
def slow(loaded):
    """Make every forward pass take 20 ms, so that a consumer reliably acts while generation is running."""
    calls = []

    def hook(module, args, kwargs):
        calls.append(time.perf_counter())
        time.sleep(0.02)

    handle = loaded.model.register_forward_pre_hook(hook, with_kwargs=True)
    yield calls
    handle.remove()


def plain_generate(loaded: LoadedModel, question: str, max_new_tokens: int) -> str:
    enc = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = loaded.model.generate(
        **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=loaded.tokenizer.pad_token_id
    )
    return loaded.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def test_stream_is_incremental_and_concatenates_to_the_final_text(loaded, monkeypatch):
    import engine.inference.generate as gen_mod

    forward = loaded.model.forward

    def slow_forward(*args, **kwargs):
        time.sleep(2 * gen_mod._MIN_UPDATE_S)  # slower than one update interval, as a big model: word by word
        return forward(*args, **kwargs)

    monkeypatch.setattr(loaded.model, "forward", slow_forward)
    updates = list(stream_generate(loaded, "what color is the sky", GREEDY))
    monkeypatch.undo()
    final = updates[-1]
    assert final.done and not any(u.done for u in updates[:-1])
    assert len(updates) >= 4  # word by word
    assert "".join(u.new_text for u in updates) == final.text
    texts = [u.text for u in updates]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert final.text == "the sky is blue and the sun is bright"
    assert final.finish_reason == "eos"  # the model stops by itself on <|end|>
    assert 0 < final.n_tokens <= GREEDY.max_new_tokens and final.prompt_tokens > 0
    assert final.ttft is not None and final.ttft <= final.elapsed
    assert final.tokens_per_s and final.tokens_per_s > 0
    assert final.peak_gib and final.peak_gib > 0
    assert all(not u.text or u.text.endswith((" ", "\n")) for u in updates[:-1])  # never half a word


def test_fast_generation_is_not_slowed_by_one_update_per_token(loaded):
    import engine.inference.generate as gen_mod

    updates = list(stream_generate(loaded, "what color is the sky", GREEDY))
    final = updates[-1]
    # updates are throttled to one per interval: the count follows the clock, not the number of tokens
    assert len(updates) <= final.elapsed / gen_mod._MIN_UPDATE_S + 3
    assert "".join(u.new_text for u in updates) == final.text == "the sky is blue and the sun is bright"
    assert [u.n_tokens for u in updates[:-1]] == sorted(u.n_tokens for u in updates[:-1])


def test_greedy_stream_equals_generate_text_equals_plain_generate(loaded):
    for question in ("say hello", "where do fish live", "something it never saw"):
        streamed = list(stream_generate(loaded, question, GREEDY))[-1].text
        assert streamed == generate_text(loaded, question, GREEDY)
        assert streamed == plain_generate(loaded, question, GREEDY.max_new_tokens)


def test_gradio_content_lists_are_flattened(loaded):
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "what do "}, {"type": "text", "text": "cats like"}],
            "metadata": {},
        }
    ]
    assert generate_text(loaded, messages, GREEDY) == generate_text(loaded, "what do cats like", GREEDY)
    assert flatten_content(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "file", "file": {"path": "/x.png"}}]},
            {"role": "assistant", "content": {"type": "text", "text": "b"}, "options": []},
            {"role": "user", "content": None},
        ]
    ) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": ""},
    ]
    with pytest.raises(GenerationError, match="Unknown chat role"):
        flatten_content([{"role": "tool", "content": "x"}])


def test_stop_event_ends_generation_at_once(loaded, slow):
    stop = threading.Event()
    updates = []
    for update in stream_generate(loaded, "what color is the sky", GREEDY, stop_event=stop):
        updates.append(update)
        stop.set()  # the user pressed Stop after the first word
    final = updates[-1]
    assert final.done and final.finish_reason == "stopped"
    assert final.n_tokens <= 4  # the whole answer is 19 tokens
    assert not [t for t in threading.enumerate() if t.name == "stream_generate"]


def test_closing_the_stream_early_stops_and_joins_the_worker(loaded, slow):
    stream = stream_generate(loaded, "what color is the sky", GREEDY)
    next(stream)
    stream.close()  # what gradio does when the client goes away
    assert not [t for t in threading.enumerate() if t.name == "stream_generate"]
    n_forward = len(slow)
    time.sleep(0.1)
    assert len(slow) == n_forward < 8  # nothing keeps generating in the background


def test_stop_strings_end_generation(loaded):
    final = list(stream_generate(loaded, "what color is the sky", GREEDY, stop_strings=["blue"]))[-1]
    assert final.text.endswith("blue") and final.finish_reason == "stopped"


def test_empty_prompt_is_an_error(loaded):
    for prompt in ("", "   \n", [], [{"role": "user", "content": [{"type": "text", "text": "  "}]}]):
        with pytest.raises(GenerationError, match="empty"):
            list(stream_generate(loaded, prompt, GREEDY))


def test_prompt_longer_than_the_context_is_an_error(loaded):
    with pytest.raises(GenerationError, match=r"context holds only 64 tokens"):
        list(stream_generate(loaded, "the sky is blue " * 40, GREEDY, chat=False))


def test_max_new_tokens_is_clamped_to_the_context(loaded):
    prompt = "the sky is blue and the sun is bright . " * 2
    n_prompt = len(loaded.tokenizer(prompt)["input_ids"])
    assert n_prompt < 64
    updates = list(stream_generate(loaded, prompt, GenerationSettings(max_new_tokens=500, do_sample=False), chat=False))
    final = updates[-1]
    assert final.max_new_tokens == 64 - n_prompt and final.n_tokens <= 64 - n_prompt
    assert any("max_new_tokens lowered from 500" in note for note in final.notes)
    assert list(stream_generate(loaded, "hello", GREEDY, chat=False))[-1].notes == []


def test_sampling_with_a_seed_is_reproducible(loaded):
    settings = GenerationSettings(max_new_tokens=12, do_sample=True, temperature=1.5, top_k=0, top_p=1.0, seed=7)
    assert generate_text(loaded, "say hello", settings) == generate_text(loaded, "say hello", settings)


def test_eos_ids_include_the_chat_end_token(loaded):
    end = loaded.tokenizer.convert_tokens_to_ids("<|end|>")
    assert end in end_token_ids(loaded)


def test_worker_errors_surface_as_generation_errors(loaded, monkeypatch):
    def boom(**kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(loaded.model, "generate", boom)
    with pytest.raises(GenerationError, match="kaboom"):
        list(stream_generate(loaded, "say hello", GREEDY))


def test_generation_on_a_4bit_model_keeps_the_weights_unpacked(tiny_dir):
    from engine.models.bnb_safety import count_repacked

    q = load_model(
        str(tiny_dir), QuantSettings(mode="4bit"), runs_dir=tiny_dir.parent, device=CPU, allow_local_paths=True
    )
    text = generate_text(q, "what color is the sky", GREEDY)
    assert text  # the answer may differ a little from the fp32 model's
    assert count_repacked(q.model) == 0


# --- sampling controls, stop strings from the settings, presets ----------------------------------------


def _recording_generate(loaded, monkeypatch) -> list[dict]:
    """Wrap model.generate so a test sees the kwargs it got and the sequences it returned."""
    real = loaded.model.generate
    calls: list[dict] = []

    def generate(**kwargs):
        out = real(**kwargs)
        calls.append({**kwargs, "sequences": out})
        return out

    monkeypatch.setattr(loaded.model, "generate", generate)
    return calls


def _repeated_ngrams(ids: list[int], n: int) -> int:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(grams) - len(set(grams))


def test_no_repeat_ngram_size_prevents_repeats(loaded, monkeypatch):
    calls = _recording_generate(loaded, monkeypatch)
    plain = GenerationSettings(max_new_tokens=30, do_sample=False, repetition_penalty=1.0)
    generate_text(loaded, "cats like", plain, chat=False)
    assert _repeated_ngrams(calls[-1]["sequences"][0].tolist(), 2) > 3  # greedy alone loops ("atsatsats...")
    assert "no_repeat_ngram_size" not in calls[-1]  # 0 = off: not passed at all
    guarded = GenerationSettings(max_new_tokens=30, do_sample=False, repetition_penalty=1.0, no_repeat_ngram_size=2)
    generate_text(loaded, "cats like", guarded, chat=False)
    assert calls[-1]["no_repeat_ngram_size"] == 2
    assert _repeated_ngrams(calls[-1]["sequences"][0].tolist(), 2) == 0  # prompt included, as HF applies it


def test_min_p_is_passed_only_when_sampling(loaded, monkeypatch):
    calls = _recording_generate(loaded, monkeypatch)
    generate_text(loaded, "say hello", GenerationSettings(max_new_tokens=4, do_sample=True, min_p=0.1, seed=1))
    assert calls[-1]["min_p"] == 0.1 and calls[-1]["do_sample"] is True
    generate_text(loaded, "say hello", GenerationSettings(max_new_tokens=4, do_sample=False, min_p=0.1))
    assert "min_p" not in calls[-1] and "temperature" not in calls[-1]
    generate_text(loaded, "say hello", GenerationSettings(max_new_tokens=4, do_sample=True, min_p=0.0, seed=1))
    assert "min_p" not in calls[-1]
    # min_p = 1 keeps only the most likely token: sampling becomes greedy
    certain = GenerationSettings(max_new_tokens=40, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, min_p=1.0, repetition_penalty=1.0)
    assert generate_text(loaded, "what color is the sky", certain) == generate_text(loaded, "what color is the sky", GREEDY)


def test_stop_strings_from_the_settings_end_generation(loaded, monkeypatch):
    settings = GenerationSettings(max_new_tokens=40, do_sample=False, repetition_penalty=1.0, stop_strings="nothing-like-this\nblue")
    final = list(stream_generate(loaded, "what color is the sky", settings))[-1]
    assert final.text == "the sky is blue" and final.finish_reason == "stopped"
    calls = _recording_generate(loaded, monkeypatch)
    list(stream_generate(loaded, "what color is the sky", settings, stop_strings=["sun", "blue"]))
    assert calls[-1]["stop_strings"] == ["nothing-like-this", "blue", "sun"]  # merged, without duplicates
    generate_text(loaded, "say hello", GREEDY)
    assert "stop_strings" not in calls[-1] and "tokenizer" not in calls[-1]


def test_stop_strings_escapes_and_list_input():
    assert GenerationSettings(stop_strings="  ###  \n\n\\n\\n\nUser:\n###").stop_list() == ["###", "\n\n", "User:"]
    assert merged_stop_strings(GenerationSettings(stop_strings="a"), ["", "b", "a"]) == ["a", "b"]
    as_list = GenerationSettings(stop_strings=["a", "b"])
    assert as_list.stop_strings == "a\nb" and as_list.stop_list() == ["a", "b"]


@pytest.mark.parametrize(
    "values,fragment",
    [
        ({"min_p": -0.1}, "min_p"),
        ({"min_p": 1.5}, "a number from 0 to 1"),
        ({"no_repeat_ngram_size": 21}, "a whole number from 0 to 20"),
        ({"no_repeat_ngram_size": -1}, "from 0 to 20"),
        ({"no_repeat_ngram_size": 2.5}, "whole number"),
        ({"stop_strings": "\n".join(f"s{i}" for i in range(9))}, "at most 8 stop strings"),
        ({"stop_strings": "ok\n" + "x" * 101}, "at most 100 characters"),
    ],
)
def test_new_generation_fields_are_validated(values, fragment):
    from engine.errors import ConfigError
    from engine.fields import from_dict

    with pytest.raises(ConfigError) as exc:
        from_dict(GenerationSettings, values)
    assert next(iter(values)) in str(exc.value) and fragment in str(exc.value)
    ok = GenerationSettings(min_p=1.0, no_repeat_ngram_size=20, stop_strings="\n".join(f"s{i}" for i in range(7)) + "\n" + "y" * 100)
    assert len(ok.stop_list()) == 8  # the limits themselves are allowed


def test_presets_file_has_the_three_presets():
    presets = generation_presets()
    assert list(presets) == ["precise", "balanced", "creative"]
    presets["precise"]["settings"]["do_sample"] = True  # a copy: the next caller is not affected
    assert generation_presets()["precise"]["settings"]["do_sample"] is False


@pytest.mark.parametrize("name", ["precise", "balanced", "creative"])
def test_each_preset_loads_applies_and_generates(loaded, name):
    preset = generation_presets()[name]
    assert preset["description"] and "\n" not in preset["description"]
    mine = GenerationSettings(max_new_tokens=6, seed=5, stop_strings="###", temperature=0.3)
    applied = apply_preset(name, mine)
    for key, value in preset["settings"].items():
        assert getattr(applied, key) == value
    # fields the preset does not name keep the form's values
    assert (applied.max_new_tokens, applied.seed, applied.stop_strings) == (6, 5, "###")
    assert apply_preset(name) == apply_preset(name, GenerationSettings())
    assert isinstance(generate_text(loaded, "say hello", applied), str)


def test_unknown_preset_is_a_clear_error():
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="preset = 'wild'.*one of precise, balanced, creative"):
        apply_preset("wild")
