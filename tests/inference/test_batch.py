"""Tests for engine/inference/batch.py: batched greedy == one-by-one greedy, OOM halving, stop, prompt parsing, CSV.

CPU and offline, on the tiny trained model of tests/test_loaders.py.
"""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import pytest
import torch
from conftest import CPU, tiny_model_dir

from engine.config import GenerationSettings
from engine.errors import DataError, EngineError, GenerationError
from engine.inference.batch import MAX_PROMPTS, BatchRow, batch_generate, parse_prompts, write_csv
from engine.inference.generate import generate_text
from engine.models.loading import LoadedModel, load_model

GREEDY = GenerationSettings(max_new_tokens=24, do_sample=False, repetition_penalty=1.0)
# Different lengths, so that left padding really happens inside a micro-batch.
PROMPTS = [
    "what color is the sky",
    "say hello",
    "where do fish live",
    "what is the capital of france",
    "how many legs has a dog",
    "what do cats like",
    "hello",
]


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    tiny = tiny_model_dir()
    return load_model(str(tiny), runs_dir=tiny.parent, device=CPU, allow_local_paths=True)


def run(loaded, prompts, settings=GREEDY, **kw):
    updates = list(batch_generate(loaded, prompts, settings, **kw))
    return updates, updates[-1]


@pytest.mark.parametrize("chat", [True, False])
def test_batched_greedy_equals_one_by_one(loaded, chat):
    prompts = PROMPTS if chat else PROMPTS[:5]  # raw completion runs to max_new_tokens: fewer, to stay fast
    updates, final = run(loaded, prompts, micro_batch=4, chat=chat)
    assert final.finished and not final.stopped and final.done == final.total == len(prompts)
    assert [r.index for r in final.rows] == list(range(len(prompts)))
    assert [r.prompt for r in final.rows] == prompts
    expected = [generate_text(loaded, p, GREEDY, chat=chat) for p in prompts]
    assert [r.output for r in final.rows] == expected
    if chat:
        assert final.rows[0].output == "the sky is blue and the sun is bright"
        assert final.rows[0].finish_reason == "eos"
    # progress: an initial update, then one per micro-batch (4 + the rest)
    assert [u.done for u in updates] == [0, 4, len(prompts)]
    assert all(u.total == len(prompts) for u in updates)
    assert all(0 < r.tokens <= GREEDY.max_new_tokens and r.seconds > 0 for r in final.rows)


def test_token_counts_and_finish_reasons_match_streaming(loaded):
    from engine.inference.generate import stream_generate

    _, final = run(loaded, PROMPTS[:3], micro_batch=3)
    for row in final.rows:
        last = list(stream_generate(loaded, row.prompt, GREEDY))[-1]
        assert (row.tokens, row.finish_reason) == (last.n_tokens, last.finish_reason)


def test_out_of_memory_halves_the_micro_batch(loaded, monkeypatch):
    real = loaded.model.generate
    sizes: list[int] = []

    def generate(**kwargs):
        sizes.append(int(kwargs["input_ids"].shape[0]))
        if kwargs["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(**kwargs)

    monkeypatch.setattr(loaded.model, "generate", generate)
    updates, final = run(loaded, PROMPTS, micro_batch=8)
    assert sizes[:3] == [7, 4, 2]  # 8 is capped to the 7 prompts, then halved (rounding up) until it fits
    assert set(sizes[3:]) <= {1, 2}
    assert final.micro_batch == 2 and final.done == len(PROMPTS)
    assert any("Out of memory" in note and "micro-batches of 2" in note for note in final.notes)
    monkeypatch.undo()
    assert [r.output for r in final.rows] == [generate_text(loaded, p, GREEDY) for p in PROMPTS]


def test_out_of_memory_with_one_prompt_is_a_clear_error(loaded, monkeypatch):
    def generate(**kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(loaded.model, "generate", generate)
    with pytest.raises(GenerationError, match="Out of memory generating for prompt 1 even alone"):
        run(loaded, PROMPTS[:3], micro_batch=4)


def test_other_generate_errors_name_the_prompts(loaded, monkeypatch):
    def generate(**kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(loaded.model, "generate", generate)
    with pytest.raises(GenerationError, match=r"prompts 1-2: RuntimeError: kaboom"):
        run(loaded, PROMPTS[:2])


def test_stop_strings_and_sampling_settings_are_used(loaded):
    settings = GenerationSettings(max_new_tokens=24, do_sample=False, repetition_penalty=1.0, stop_strings="blue")
    _, final = run(loaded, ["what color is the sky", "say hello"], settings)
    sky, hello = final.rows
    assert sky.output.endswith("blue") and sky.finish_reason == "stopped"
    assert sky.tokens < final.rows[1].tokens + 20
    assert hello.output == generate_text(loaded, "say hello", GREEDY)
    sampled = GenerationSettings(max_new_tokens=8, do_sample=True, temperature=1.5, top_k=0, top_p=1.0, min_p=0.05, seed=3)
    a = [r.output for r in run(loaded, PROMPTS[:3], sampled)[1].rows]
    b = [r.output for r in run(loaded, PROMPTS[:3], sampled)[1].rows]
    assert a == b  # seeded once per run: reproducible for the same micro-batch size


def test_stop_event_ends_the_run_between_micro_batches(loaded):
    stop = threading.Event()
    updates = []
    for update in batch_generate(loaded, PROMPTS, GREEDY, micro_batch=2, stop_event=stop):
        updates.append(update)
        if update.done >= 2:
            stop.set()
    final = updates[-1]
    assert final.finished and final.stopped and final.done == 2 < final.total


def test_bad_requests_are_rejected_before_generating(loaded):
    with pytest.raises(GenerationError, match="Prompt 2: .*empty"):
        run(loaded, ["hello", "   "])
    with pytest.raises(GenerationError, match=r"no room for an answer.*prompt number 2"):
        run(loaded, ["hello", "the sky is blue " * 40], chat=False)
    with pytest.raises(EngineError, match="micro_batch = 0"):
        run(loaded, ["hello"], micro_batch=0)
    with pytest.raises(GenerationError, match="no prompts"):
        run(loaded, [])


def test_max_new_tokens_is_clamped_per_micro_batch(loaded):
    long_prompt = "the sky is blue and the sun is bright . " * 2
    n_long = len(loaded.tokenizer(long_prompt)["input_ids"])
    settings = GenerationSettings(max_new_tokens=500, do_sample=False, repetition_penalty=1.0)
    _, final = run(loaded, ["hello", long_prompt], settings, chat=False)
    assert all(r.tokens <= 64 - n_long for r in final.rows)
    assert any(f"max_new_tokens lowered to {64 - n_long}" in note for note in final.notes)


# --- parse_prompts ------------------------------------------------------------------------------------


def test_parse_prompts_from_text():
    assert parse_prompts("  first \n\n second\r\nthird\n", None) == ["first", "second", "third"]
    assert parse_prompts("one", "") == ["one"]
    with pytest.raises(DataError, match="no prompts in the text box"):
        parse_prompts(" \n  \n", None)
    with pytest.raises(DataError, match="no prompts"):
        parse_prompts(None, None)
    with pytest.raises(DataError, match=f"1,001 prompts; the limit is {MAX_PROMPTS:,}"):  # numbers written for people
        parse_prompts("\n".join(f"p{i}" for i in range(1001)), None)


def test_parse_prompts_from_files(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("\ufeffalpha\n\nbeta\n", encoding="utf-8")
    assert parse_prompts(None, str(txt)) == ["alpha", "beta"]

    jsonl = tmp_path / "p.jsonl"
    rows = [{"prompt": "a"}, {"Instruction": "convert", "input": "05/09/2023"}, {"text": "c"}, "d", {"prompt": "  "}]
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert parse_prompts("", str(jsonl)) == ["a", "convert\n\n05/09/2023", "c", "d"]

    comma = tmp_path / "p.csv"
    comma.write_text('id,prompt\n1,"hello, world"\n2,second\n', encoding="utf-8")
    assert parse_prompts(None, str(comma)) == ["hello, world", "second"]
    semicolon = tmp_path / "q.csv"  # Excel in Portuguese locales writes ';' and a byte-order mark
    semicolon.write_text("\ufeffinstruction;output\nConverta 01/02/2003;2003-02-01\n", encoding="utf-8")
    assert parse_prompts(None, str(semicolon)) == ["Converta 01/02/2003"]


@pytest.mark.parametrize(
    "name,content,fragment",
    [
        ("p.pdf", "x", "unsupported file type '.pdf'"),
        ("p.csv", "question,answer\nq,a\n", "row 1 has no prompt column (found 'question', 'answer')"),
        ("p.jsonl", '{"prompt": "a"}\n{oops\n', "line 2 is not valid JSON"),
        ("p.jsonl", '{"prompt": "a"}\n[1, 2]\n', "line 2 has no prompt column"),
        ("p.txt", "   \n\n", "empty"),
    ],
)
def test_parse_prompts_file_errors(tmp_path, name, content, fragment):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_prompts(None, str(path))


def test_parse_prompts_other_file_errors(tmp_path):
    latin1 = tmp_path / "l.txt"
    latin1.write_bytes("ol\xe1\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        parse_prompts(None, str(latin1))
    with pytest.raises(DataError, match="not found"):
        parse_prompts(None, str(tmp_path / "missing.txt"))
    with pytest.raises(DataError, match="not both"):
        parse_prompts("hello", str(latin1))
    many = tmp_path / "many.txt"
    many.write_text("\n".join(f"p{i}" for i in range(1001)), encoding="utf-8")
    with pytest.raises(DataError, match="limit is 1,000"):
        parse_prompts(None, str(many))


# --- write_csv ----------------------------------------------------------------------------------------


def test_write_csv_is_atomic_and_round_trips(tmp_path):
    rows = [
        BatchRow(0, "Converta 05/09/2023, por favor", 'a "quoted"\nanswer', 7, 0.123456789, "eos"),
        {"prompt": "p2", "output": "ação", "tokens": 3, "seconds": 0.5},
    ]
    path = write_csv(rows, tmp_path / "out" / "results.csv")
    assert path == tmp_path / "out" / "results.csv"
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.csv"]  # no temp file left behind
    with path.open(encoding="utf-8-sig", newline="") as handle:
        back = list(csv.DictReader(handle))
    assert back == [
        {"prompt": "Converta 05/09/2023, por favor", "output": 'a "quoted"\nanswer', "tokens": "7", "seconds": "0.1235"},
        {"prompt": "p2", "output": "ação", "tokens": "3", "seconds": "0.5"},
    ]


def test_write_csv_failure_keeps_the_old_file(tmp_path):
    path = write_csv([{"prompt": "old", "output": "x", "tokens": 1, "seconds": 0.1}], tmp_path / "r.csv")
    before = path.read_bytes()

    def rows():
        yield {"prompt": "new", "output": "y", "tokens": 1, "seconds": 0.1}
        raise RuntimeError("crash while writing")

    with pytest.raises(RuntimeError, match="crash"):
        write_csv(rows(), path)
    assert path.read_bytes() == before
    assert [p.name for p in Path(tmp_path).iterdir()] == ["r.csv"]
