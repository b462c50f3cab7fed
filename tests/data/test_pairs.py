"""Preference pairs and GRPO prompts: detection (columns and chat-message pairs), the column mapping, broken rows with
their reasons, the built-in sample, and a pair tokenized exactly as supervised training renders the same conversation."""

from __future__ import annotations

import json

import pytest

from engine.config import TrainConfig
from engine.data.formats import load_records, to_messages
from engine.data.pairs import build_pair_data, build_prompt_data, encode_pair, encode_prompt, inspect_pairs
from engine.data.preference_sample import FILE, preference_pairs
from engine.errors import ConfigError, DataError
from engine.refs import mapping_format, parse_columns
from tests.conftest import corpus_tokenizer, write_jsonl


def test_prompt_chosen_rejected_columns_are_detected(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "2+2?", "chosen": "4", "rejected": "5"}] * 3)
    rs = load_records(str(path))
    assert rs.format == "preference" and len(rs) == 3
    assert rs.records[0] == {"prompt": [{"role": "user", "content": "2+2?"}], "chosen": [{"role": "assistant", "content": "4"}],
                             "rejected": [{"role": "assistant", "content": "5"}]}
    # supervised methods train on the chosen answer
    assert to_messages(rs.records[0], "preference")[-1] == {"role": "assistant", "content": "4"}


def test_chat_message_pairs_share_their_prompt(tmp_path):
    user = {"role": "user", "content": "Capital of Brazil?"}
    rows = [{"chosen": [user, {"role": "assistant", "content": "Brasília"}], "rejected": [user, {"role": "assistant", "content": "Rio"}]},
            {"prompt": [user], "chosen": [{"role": "assistant", "content": "Brasília"}], "rejected": [{"from": "gpt", "value": "São Paulo"}]}]
    rs = load_records(str(write_jsonl(tmp_path / "c.jsonl", rows)))
    assert rs.format == "preference" and not rs.dropped
    for record in rs.records:
        assert record["prompt"] == [user] and record["chosen"] == [{"role": "assistant", "content": "Brasília"}]


def test_broken_pairs_are_dropped_with_a_reason(tmp_path):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b"},
            {"prompt": "q", "chosen": "", "rejected": "b"},
            {"prompt": "q", "chosen": "same", "rejected": "same"},
            {"prompt": "", "chosen": "a", "rejected": "b"},
            {"chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]}]
    rs = load_records(str(write_jsonl(tmp_path / "b.jsonl", rows)))
    reasons = dict(rs.dropped)
    assert len(rs) == 1 and set(reasons) == {2, 3, 4, 5}
    assert "chosen" in reasons[2] and "same answer" in reasons[3] and "no prompt" in reasons[4] and "no prompt" in reasons[5]


def test_column_mapping_makes_pairs(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [{"question": "q", "good": "a", "bad": "b"}] * 2)
    mapping = parse_columns("prompt=question, chosen=good, rejected=bad")
    assert mapping_format(mapping) == "preference" and mapping_format(parse_columns("prompt=q, completion=a")) == "prompt_completion"
    rs = load_records(str(path), columns=mapping)
    assert rs.format == "preference" and rs.records[0]["chosen"][0]["content"] == "a"
    with pytest.raises(ConfigError):
        parse_columns("chosen=good, completion=x")  # mixes two formats


def test_builtin_preferences_file_equals_its_generator_and_mixes_languages_and_tasks():
    from engine.data.files import SAMPLES_DIR

    shipped = [json.loads(line) for line in (SAMPLES_DIR / FILE).read_text(encoding="utf-8").splitlines()]
    assert shipped == preference_pairs()  # `python -m engine.data.preference_sample` rewrites it
    rs = load_records("builtin:preferences")
    assert rs.format == "preference" and len(rs) == len(shipped) and not rs.dropped
    dates = [p for p in shipped if p["chosen"][:2] in ("19", "20") and len(p["chosen"]) == 10]
    assert len(dates) == 300 and all(p["rejected"] != p["chosen"] for p in dates)
    assert any("AAAA" in p["prompt"] for p in dates) and any("YYYY" in p["prompt"] for p in dates)  # Portuguese and English
    swapped = [p for p in dates if p["rejected"][:4] == p["chosen"][:4] and p["rejected"][5:7] == p["chosen"][8:10]]
    assert swapped and any("/" in p["rejected"] for p in dates)  # day/month swapped, and wrong formats


def test_a_pair_is_the_supervised_rendering_of_each_answer():
    tok = corpus_tokenizer()
    record = load_records("builtin:preferences").records[0]
    e = encode_pair(record, tok, 256)
    from engine.data.pairs import render_ids

    assert e["prompt_ids"] + e["chosen_ids"] == render_ids(tok, record["prompt"] + record["chosen"], False)
    assert e["prompt_ids"] == render_ids(tok, record["prompt"], True)
    assert tok.eos_token_id in e["chosen_ids"] and tok.eos_token_id in e["rejected_ids"]  # each answer ends as the template ends it
    room = next(i for i in range(1, 20) if e["chosen_ids"][:i] != e["rejected_ids"][:i])  # the first token where they differ
    short = encode_pair(record, tok, len(e["prompt_ids"]) + room)
    assert short["truncated"] and len(short["chosen_ids"]) == room


def test_grpo_prompt_keeps_the_reference_answer():
    tok = corpus_tokenizer()
    item = load_records("builtin:dates").records[0]
    e = encode_prompt(item, "instruction", tok, 128)
    assert e["answer"] == item["output"] and e["prompt"].endswith("<|assistant|>\n") and item["instruction"] in e["prompt"]
    assert tok(e["prompt"], add_special_tokens=False)["input_ids"] == tok.apply_chat_template(
        to_messages(item, "instruction")[:-1], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]


def test_wrong_data_for_the_method_is_a_keyed_message():
    tok = corpus_tokenizer()
    with pytest.raises(DataError) as err:
        build_pair_data(TrainConfig(method="dpo", dataset="builtin:dates"), tok, 128)
    assert err.value.key == "preference.msg.needs_pairs" and "builtin:preferences" in err.value.render("en")
    assert "pares de preferência" in err.value.render("pt-BR")
    with pytest.raises(DataError) as err:
        build_prompt_data(TrainConfig(method="grpo", dataset="builtin:corpus"), tok, 128)
    assert err.value.key == "preference.msg.needs_prompts"


def test_pair_and_prompt_data_split_an_eval_set():
    tok = corpus_tokenizer()
    pairs = build_pair_data(TrainConfig(method="dpo", dataset="builtin:preferences", eval_fraction=0.1), tok, 256)
    assert len(pairs.evals) == 49 and len(pairs.train) + len(pairs.evals) == 494
    assert set(pairs.train[0]) == {"prompt_ids", "chosen_ids", "rejected_ids"}
    prompts = build_prompt_data(TrainConfig(method="grpo", dataset="builtin:dates", eval_fraction=0.0), tok, 72)
    assert len(prompts.train) == 600 and prompts.event_fields()["rows_kept"] == 600


def test_the_data_check_shows_a_pair_as_the_model_reads_it():
    tok = corpus_tokenizer()
    cfg = TrainConfig(method="dpo", dataset="builtin:preferences", max_seq_len=256)
    ins = inspect_pairs(cfg, load_records("builtin:preferences"), tok, "the tokenizer", lang="pt-BR")
    first = ins.preview[0]["text"]
    assert "<|user|>" in first and "\n✓ 2022-07-11" in first and "\n✗ 2022/07/11" in first
    assert "pares de preferência" in ins.summary and ins.histogram and not ins.dropped
    grpo = inspect_pairs(TrainConfig(method="grpo", dataset="builtin:dates"), load_records("builtin:dates"), tok, "t")
    assert grpo.preview[0]["text"].endswith("→ 2022-07-11") and "prompts" in grpo.summary
