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


def test_kto_rows_are_labelled_answers_rendered_as_supervised_training_renders_them(tmp_path):
    from engine.data.pairs import encode_completion

    tok = corpus_tokenizer()
    data = build_pair_data(TrainConfig(method="kto", dataset="builtin:feedback", eval_fraction=0.1), tok, 256)
    assert set(data.train[0]) == {"prompt_ids", "completion_ids", "label"} and len(data.train) + len(data.evals) == 494
    assert data.report["good"] + data.report["bad"] == len(data.train) and data.report["kind"] == "labelled"
    # the rows are shuffled once with the seed (trl reads them in order): not the file's date/instruction alternation
    again = build_pair_data(TrainConfig(method="kto", dataset="builtin:feedback", eval_fraction=0.1), tok, 256)
    assert [e["completion_ids"] for e in again.train] == [e["completion_ids"] for e in data.train]
    record = load_records("builtin:feedback").records[0]
    e = encode_completion(record, tok, 256)
    full = tok.apply_chat_template(to_messages(record, "unpaired"), tokenize=True, return_dict=True)["input_ids"]
    assert e["prompt_ids"] + e["completion_ids"] == list(full) and e["label"] is True
    # preference pairs are unpaired: a good and a bad answer each
    pairs = build_pair_data(TrainConfig(method="kto", dataset="builtin:preferences", eval_fraction=0.0), tok, 256)
    assert len(pairs.train) == 988 and pairs.report["good"] == pairs.report["bad"] == 494


def test_kto_data_check_and_refusals_in_both_languages(tmp_path):
    tok = corpus_tokenizer()
    cfg = TrainConfig(method="kto", dataset="builtin:feedback", max_seq_len=256)
    ins = inspect_pairs(cfg, load_records("builtin:feedback"), tok, "o tokenizador", lang="pt-BR")
    assert "respostas rotuladas" in ins.summary and "✔" in ins.summary
    assert ins.preview[0]["text"].endswith("\n✔ 2022-07-11<|end|>") or "\n✔ 2022-07-11" in ins.preview[0]["text"]
    with pytest.raises(DataError) as err:
        build_pair_data(TrainConfig(method="kto", dataset="builtin:dates"), tok, 128)
    assert err.value.key == "preference.msg.needs_labelled" and "builtin:feedback" in err.value.render("pt-BR")
    only_good = write_jsonl(tmp_path / "good.jsonl", [{"prompt": f"q{i}", "completion": "a", "label": True} for i in range(4)])
    with pytest.raises(DataError) as err:
        build_pair_data(TrainConfig(method="kto", dataset=str(only_good)), tok, 128)
    assert err.value.key == "preference.msg.one_label"
    with pytest.raises(DataError) as err:  # a DPO run on labelled answers is offered KTO
        inspect_pairs(TrainConfig(method="dpo", dataset="builtin:feedback"), load_records("builtin:feedback"), tok, "t")
    assert "kto" in err.value.render("en")


def test_dropped_pairs_in_the_data_check_speak_the_visitors_language(tmp_path):
    tok = corpus_tokenizer()
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "x " * 300, "chosen": "a", "rejected": "b"}])
    ins = inspect_pairs(TrainConfig(method="dpo", dataset=str(path), max_seq_len=64), load_records(str(path)), tok, "t", lang="pt-BR")
    assert ins.dropped and "só o prompt já ocupa" in ins.dropped[0][1] and "só o prompt" in ins.summary


def test_kto_loss_weights_follow_trls_recommended_range():
    from engine.training.preference import kto_weights

    assert kto_weights(50, 50) == (1.0, 1.0) and kto_weights(60, 50) == (1.0, 1.0)
    good_w, bad_w = kto_weights(10, 40)  # few good answers weigh more
    assert 1 <= good_w * 10 / (bad_w * 40) <= 4 / 3
    good_w, bad_w = kto_weights(90, 10)  # few bad answers weigh more
    assert 1 <= good_w * 90 / (bad_w * 10) <= 4 / 3 + 1e-9
