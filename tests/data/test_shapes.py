"""The shapes of the dataset families people fine-tune on, each as a small file written here: what the model will train
on (the messages each row becomes, or the pair / labelled answer the trainer gets), and every column either used or
named in the data check's note (docs/data.md lists the same shapes)."""

from __future__ import annotations

import json

import pytest

from engine.config import TrainConfig
from engine.data.build import train_records
from engine.data.formats import load_records, to_messages
from engine.errors import DataError, for_people
from tests.conftest import corpus_tokenizer, trained_spans, write_csv, write_jsonl


def _notes(rs, lang="en"):
    return " ".join(for_people(n, lang) for n in rs.notes)


def test_alpaca_rows_use_every_column(tmp_path):
    rs = load_records(str(write_jsonl(tmp_path / "alpaca.jsonl", [{"instruction": "Translate", "input": "bom dia", "output": "good morning"}])))
    assert rs.format == "instruction" and not rs.notes
    assert to_messages(rs.records[0], rs.format) == [{"role": "user", "content": "Translate\n\nbom dia"},
                                                     {"role": "assistant", "content": "good morning"}]


def test_dolly_context_joins_the_question_and_category_is_named(tmp_path):
    row = {"instruction": "When was it founded?", "context": "The club was founded in 1902.", "response": "In 1902.", "category": "closed_qa"}
    rs = load_records(str(write_jsonl(tmp_path / "dolly.jsonl", [row])))
    assert rs.format == "instruction"
    assert to_messages(rs.records[0], rs.format) == [
        {"role": "user", "content": "When was it founded?\n\nThe club was founded in 1902."}, {"role": "assistant", "content": "In 1902."}]
    # the one column left is named, with the mapping that would put it into the question
    assert "'category'" in _notes(rs) and "input=category" in _notes(rs) and "'category'" in _notes(rs, "pt-BR")
    # tokenized as the run does: the context is in the prompt (not trained on), the answer is trained on
    from engine.data.tokenize import tokenize_records

    tok = corpus_tokenizer()
    example = tokenize_records(rs, tok, 128).examples[0]
    assert "1902." in tok.decode(example["input_ids"]) and trained_spans(example, tok)[0].startswith("In 1902.")


def test_sharegpt_top_level_system_becomes_the_system_turn(tmp_path):
    row = {"id": "x1", "system": "You answer in one word.",
           "conversations": [{"from": "human", "value": "Capital of France?"}, {"from": "gpt", "value": "Paris."}]}
    rs = load_records(str(write_jsonl(tmp_path / "sharegpt.jsonl", [row])))
    assert rs.format == "chat"
    assert to_messages(rs.records[0], rs.format) == [{"role": "system", "content": "You answer in one word."},
                                                     {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}]
    assert "'id'" in _notes(rs)  # named, not silently dropped


def test_openai_chat_with_tools_column_named(tmp_path):
    row = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
           "tools": []}
    rs = load_records(str(write_jsonl(tmp_path / "openai.jsonl", [row])))
    assert rs.format == "chat" and to_messages(rs.records[0], rs.format)[0] == {"role": "system", "content": "Be brief."}
    assert "'tools'" in _notes(rs)


def test_trl_conversational_prompt_completion(tmp_path):
    row = {"prompt": [{"role": "user", "content": "Hi"}], "completion": [{"role": "assistant", "content": "Hello!"}]}
    rs = load_records(str(write_jsonl(tmp_path / "trl.jsonl", [row])))
    assert rs.format == "prompt_completion" and not rs.notes
    assert to_messages(rs.records[0], rs.format) == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]


def test_ultrafeedback_pairs_drop_the_repeated_prompt_and_name_the_scores(tmp_path):
    prompt = "Name a primary colour."
    row = {"prompt": prompt, "prompt_id": "abc", "score_chosen": 9.0, "score_rejected": 2.0,
           "chosen": [{"role": "user", "content": prompt}, {"role": "assistant", "content": "Red."}],
           "rejected": [{"role": "user", "content": prompt}, {"role": "assistant", "content": "Green."}],
           "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": "Red."}]}
    rs = load_records(str(write_jsonl(tmp_path / "uf.jsonl", [row])))
    assert rs.format == "preference"
    record = rs.records[0]
    assert record["prompt"] == [{"role": "user", "content": prompt}]
    assert record["chosen"] == [{"role": "assistant", "content": "Red."}] and record["rejected"] == [{"role": "assistant", "content": "Green."}]
    notes = _notes(rs)
    assert all(f"'{c}'" in notes for c in ("prompt_id", "score_chosen", "score_rejected", "messages"))


def test_anthropic_hh_transcripts_are_split_at_the_shared_turns(tmp_path):
    chosen = "\n\nHuman: What is the capital of Brazil?\n\nAssistant: Brasília.\n\nHuman: And of Portugal?\n\nAssistant: Lisbon."
    rejected = "\n\nHuman: What is the capital of Brazil?\n\nAssistant: Brasília.\n\nHuman: And of Portugal?\n\nAssistant: Porto."
    rs = load_records(str(write_jsonl(tmp_path / "hh.jsonl", [{"chosen": chosen, "rejected": rejected}] * 2)))
    assert rs.format == "preference" and len(rs) == 2 and not rs.dropped
    record = rs.records[0]
    assert [m["role"] for m in record["prompt"]] == ["user", "assistant", "user"] and record["prompt"][-1]["content"] == "And of Portugal?"
    assert record["chosen"] == [{"role": "assistant", "content": "Lisbon."}] and record["rejected"] == [{"role": "assistant", "content": "Porto."}]
    # the data check says where the split falls, in both languages
    assert "first 3 turns" in _notes(rs) and "And of Portugal?" in _notes(rs) and "Lisbon." in _notes(rs)
    assert "3 primeiros turnos" in _notes(rs, "pt-BR")


def test_texts_sharing_an_opening_split_as_trl_does(tmp_path):
    rs = load_records(str(write_jsonl(tmp_path / "t.jsonl", [{"chosen": "The sky is blue.", "rejected": "The sky is green."}])))
    record = rs.records[0]
    assert record["prompt"] == [{"role": "user", "content": "The sky is"}]  # trl's extract_prompt: the space stays with the answers
    assert record["chosen"][0]["content"] == " blue." and record["rejected"][0]["content"] == " green."
    assert "'The sky is'" in _notes(rs) or "The sky is'" in _notes(rs)


def test_orca_pairs_name_the_prompt_column_and_the_mapping_uses_it_with_the_system(tmp_path):
    rows = [{"system": "You are helpful.", "question": f"What is {i}+{i}?", "chosen": str(2 * i), "rejected": str(2 * i + 1)} for i in range(1, 4)]
    path = write_jsonl(tmp_path / "orca.jsonl", rows)
    with pytest.raises(DataError) as err:
        load_records(str(path))
    assert "prompt=question" in err.value.render("en") and "prompt=question" in err.value.render("pt-BR")
    assert "coluna 'question'" in err.value.render("pt-BR")
    rs = load_records(str(path), columns={"prompt": "question"})
    assert rs.format == "preference" and len(rs) == 3 and not rs.notes
    assert rs.records[0]["prompt"] == [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "What is 1+1?"}]


@pytest.mark.parametrize(("good", "bad"), [(True, False), ("true", "false"), (1, 0), ("👍", "👎"), ("good", "bad"), ("sim", "não")])
def test_kto_labelled_completions_are_their_own_format(tmp_path, good, bad):
    rows = [{"prompt": "2+2?", "completion": "4", "label": good}, {"prompt": "2+2?", "completion": "5", "label": bad}]
    rs = load_records(str(write_jsonl(tmp_path / "kto.jsonl", rows)))
    assert rs.format == "unpaired" and not rs.notes
    assert [r["label"] for r in rs.records] == [True, False]
    assert rs.records[1]["completion"] == [{"role": "assistant", "content": "5"}]


def test_labelled_completions_are_refused_for_sft_naming_the_label_and_offering_kto(tmp_path):
    rows = [{"question": "2+2?", "answer": "4", "thumbs": "up"}, {"question": "2+2?", "answer": "5", "thumbs": "down"}]
    path = write_jsonl(tmp_path / "feedback.jsonl", rows)
    columns = "prompt=question, completion=answer, label=thumbs"
    for method in ("lora", "full", "dpo", "grpo"):
        with pytest.raises(DataError) as err:
            train_records(TrainConfig(method=method, dataset=str(path), columns=columns))
        assert "'thumbs'" in err.value.render("en") and "kto" in err.value.render("en") and "kto" in err.value.render("pt-BR")
    # a good/bad mark under a feedback export's name is the label even when the mapping does not name it
    rs = train_records(TrainConfig(method="kto", dataset=str(path), columns="prompt=question, completion=answer"))
    assert rs.format == "unpaired" and [r["label"] for r in rs.records] == [True, False] and "'thumbs'" in _notes(rs)
    with pytest.raises(DataError, match="'thumbs'.*kto"):
        train_records(TrainConfig(method="lora", dataset=str(path), columns="prompt=question, completion=answer"))
    bad = write_jsonl(tmp_path / "bad.jsonl", [*rows, {"question": "q", "answer": "a", "thumbs": "maybe"}])
    dropped = load_records(str(bad), columns={"prompt": "question", "completion": "answer", "label": "thumbs"}).dropped
    assert dropped[0][0] == 3 and "maybe" in for_people(dropped[0][1], "pt-BR") and "rótulo" in for_people(dropped[0][1], "pt-BR")


def test_spreadsheet_export_with_capitalised_columns(tmp_path):
    path = write_csv(tmp_path / "sheet.csv", ["Pergunta", "Resposta", "Autor"], [["Quanto é 2+2?", "4", "Ana"], ["Capital do Brasil?", "Brasília", "Rui"]])
    with pytest.raises(DataError) as err:
        load_records(str(path))
    assert "instruction=pergunta, output=resposta" in err.value.render("pt-BR")
    rs = load_records(str(path), columns={"instruction": "pergunta", "output": "resposta"})
    assert to_messages(rs.records[0], rs.format)[0] == {"role": "user", "content": "Quanto é 2+2?"}
    assert "'autor'" in _notes(rs) and "input=autor" in _notes(rs)


def test_a_system_mapping_alone_keeps_the_detected_format(tmp_path):
    rows = [{"persona": "Be brief.", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    assert "system=persona" in _notes(load_records(str(path)))
    rs = load_records(str(path), columns={"system": "persona"})
    assert rs.format == "chat" and to_messages(rs.records[0], rs.format)[0] == {"role": "system", "content": "Be brief."} and not rs.notes


def test_builtin_feedback_is_derived_from_the_pairs_and_balanced():
    from engine.data.files import SAMPLES_DIR
    from engine.data.preference_sample import FEEDBACK_FILE, feedback_rows, preference_pairs

    shipped = [json.loads(line) for line in (SAMPLES_DIR / FEEDBACK_FILE).read_text(encoding="utf-8").splitlines()]
    assert shipped == feedback_rows()  # `python -m engine.data.preference_sample` rewrites it
    pairs = preference_pairs()
    assert all(r["completion"] == (p["chosen"] if r["label"] else p["rejected"]) for r, p in zip(shipped, pairs, strict=True))
    good = sum(r["label"] for r in shipped)
    assert 0.4 < good / len(shipped) < 0.6
    rs = load_records("builtin:feedback")
    assert rs.format == "unpaired" and len(rs) == len(shipped) and not rs.dropped and not rs.notes


def test_a_curriculum_difficulty_column_is_not_called_unused(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"instruction": "q", "output": "a", "level": 2, "source": "x"}])
    assert "'level'" in _notes(load_records(str(path)))
    rs = train_records(TrainConfig(method="full", dataset=str(path), curriculum="column", difficulty_column="level"))
    assert "'level'" not in _notes(rs) and "'source'" in _notes(rs)
