"""Loose model search: a model is found however a person writes its name (spaces, case, punctuation, the owner, a
variant word), in the engine's lookup and in the estimator list's labels, which gradio's dropdown filters by substring."""

from __future__ import annotations

import pytest

from engine.estimator.catalog import catalog, catalog_lookup, choice_label, loose_key
from engine.estimator.handoff import check_ui_estimator_model
from engine.views import estimate_view


@pytest.mark.parametrize(("typed", "name"), [
    ("Llama 3.1 8B", "llama-3.1-8b"), ("llama3.1 8b", "llama-3.1-8b"), ("LLAMA-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("Meta Llama 3.1 8B", "llama-3.1-8b"),
    ("Qwen 2.5 1.5B Instruct", "qwen2.5-1.5b"), ("qwen2.5_1.5b", "qwen2.5-1.5b"), ("SmolLM2 135M", "smollm2-135m"),
    ("GPT2 XL", "gpt2-xl"), ("Gemma 2 2B", "gemma-2-2b"), ("TinyLlama 1.1B", "tinyllama-1.1b"),
])
def test_names_written_loosely_find_the_catalog_model(typed, name):
    entry = catalog_lookup(typed)
    assert entry is not None and entry.name == name


def test_loose_keys_keep_numbers_apart_and_nothing_is_found_for_nonsense():
    assert loose_key("Llama 3.1 8B") == loose_key("llama-3.1-8b") != loose_key("llama-3-18b")
    assert catalog_lookup("") is None and catalog_lookup("no such model 99x") is None
    # exact names still win over loose ones: every catalog name finds itself
    assert all(catalog_lookup(e.name) is e for e in catalog())


def test_the_estimator_list_finds_a_model_by_the_way_people_write_it():
    """gradio's Dropdown keeps the choices whose label contains the typed text (case ignored): the label holds both
    spellings, and a value typed another way is resolved to the catalog name before the estimate."""
    labels = {value: label.lower() for label, value in estimate_view.model_choices(online=True)}
    assert "llama 3.1 8b" in labels["llama-3.1-8b"] and "llama-3.1-8b" in labels["llama-3.1-8b"]
    assert "qwen2.5 1.5b" in labels["qwen2.5-1.5b"]
    assert [v for v, label in labels.items() if "llama 3.1 8b" in label] == ["llama-3.1-8b"]
    assert choice_label(catalog_lookup("llama-2-7b")) == "Llama 2 7b · llama-2-7b"  # no "hf" of a converted checkpoint
    assert check_ui_estimator_model("Llama 3.1 8B", upload_dir=__import__("pathlib").Path("/nonexistent")) == "llama-3.1-8b"


def test_the_hand_off_of_a_loosely_written_name_gives_the_hub_id():
    from engine.config import MemoryQuery
    from engine.estimator.handoff import train_values_from_query

    assert train_values_from_query(MemoryQuery(model="Llama 3.1 8B"))["base_model"] == "meta-llama/Llama-3.1-8B"
    assert train_values_from_query(MemoryQuery(model="Qwen/Qwen2.5-1.5B-Instruct"))["base_model"] == "Qwen/Qwen2.5-1.5B-Instruct"
