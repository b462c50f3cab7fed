"""A Space in demo mode (engine/space.py): per-run limits refused before work starts and named in both languages, the
owner's variables, the storage notice, /data/runs when the Space has persistent storage, the duplicate link."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from engine import refs, space
from engine.config import TrainConfig
from engine.errors import EngineError
from engine.views.space_view import space_notice_md


@pytest.fixture
def on_space(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/compact-llm-lab")
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    for env in space.LIMIT_ENV.values():
        monkeypatch.delenv(env, raising=False)


def _cfg(**kw) -> TrainConfig:
    base = dict(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=500, max_seq_len=72)
    return TrainConfig(**{**base, **kw})


def test_demo_mode_needs_a_space_and_shared_mode(monkeypatch):
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    assert space.demo_mode({"SPACE_ID": "a/b"}) and not space.demo_mode({})
    monkeypatch.setenv("COMPACT_LAB_SHARED", "0")
    assert not space.demo_mode({"SPACE_ID": "a/b"})


def test_the_first_run_fits_the_default_limits(on_space, tmp_path):
    space.check_train_config(_cfg(), tmp_path)  # the first run's defaults: 500 steps at 72 tokens on the built-in model


@pytest.mark.parametrize(("change", "limit", "words_en", "words_pt"), [
    ({"max_steps": 10_000_000}, "max_steps", "at most 600 steps per run (you asked for 10,000,000)", "no máximo 600 passos"),
    ({"max_steps": 0, "epochs": 1000.0}, "max_epochs", "at most 3 epochs per run (you asked for 1000)", "no máximo 3 épocas"),
    ({"max_seq_len": 4096}, "max_seq_len", "at most 256 tokens (you asked for 4,096)", "no máximo 256 tokens"),
])
def test_an_oversized_run_is_refused_naming_the_limit(on_space, tmp_path, change, limit, words_en, words_pt):
    with pytest.raises(EngineError) as err:
        space.check_train_config(_cfg(**change), tmp_path)
    assert words_en in err.value.render("en") and space.LIMIT_ENV[limit] in err.value.render("en")
    assert words_pt in err.value.render("pt-BR") and space.LIMIT_ENV[limit] in err.value.render("pt-BR")


def test_the_owner_changes_the_limits_with_variables(on_space, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPACT_LAB_SPACE_MAX_STEPS", "20000")
    monkeypatch.setenv("COMPACT_LAB_SPACE_MAX_MINUTES", "90")
    lim = space.limits()
    assert lim.max_steps == 20000 and isinstance(lim.max_steps, int) and lim.max_minutes == 90.0 and lim.max_seq_len == 256
    space.check_train_config(_cfg(max_steps=15000, save_steps=1000), tmp_path)  # evaluations stay within their own limit
    monkeypatch.setenv("COMPACT_LAB_SPACE_MAX_SEQ_LEN", "lots")
    with pytest.raises(EngineError, match="COMPACT_LAB_SPACE_MAX_SEQ_LEN = lots"):
        space.limits()


def test_a_hub_model_is_sized_from_its_listing_before_anything_is_downloaded(on_space, tmp_path):
    def listing(gib):
        files = [SimpleNamespace(rfilename="model.safetensors", size=int(gib * 2**30)), SimpleNamespace(rfilename="tokenizer.json", size=10**9)]
        return SimpleNamespace(model_info=lambda ref, files_metadata, token: SimpleNamespace(siblings=files))

    space.check_train_config(_cfg(method="lora", base_model="Qwen/Qwen2.5-0.5B"), tmp_path, api=listing(0.92))
    with pytest.raises(EngineError) as err:
        space.check_train_config(_cfg(method="lora", base_model="meta-llama/Llama-3.1-8B"), tmp_path, api=listing(14.96))
    assert "14.96 GiB" in err.value.render("en") and "at most 1 GiB" in err.value.render("en") and "no máximo 1 GiB" in err.value.render("pt-BR")
    assert space.model_weights_gib("builtin:compact-mini", tmp_path) < 0.01  # the shipped built-in model: a few MB


def test_outside_a_space_nothing_is_limited(monkeypatch, tmp_path):
    monkeypatch.delenv("SPACE_ID", raising=False)
    space.check_train_config(_cfg(max_steps=10_000_000, max_seq_len=4096), tmp_path)
    assert space_notice_md(tmp_path) == "" and space.duplicate_url({}) is None


def test_the_page_notice_says_the_limits_the_storage_and_links_the_duplicate(on_space, tmp_path):
    md = space_notice_md(tmp_path, "en")
    assert "600 steps" in md and "15 minutes" in md and "256 tokens" in md
    assert "disappear when it restarts" in md and "download yours" in md
    assert "[Duplicate this Space](https://huggingface.co/spaces/someone/compact-llm-lab?duplicate=true)" in md
    pt = space_notice_md(tmp_path, "pt-BR")
    assert "somem quando ele reinicia" in pt and "Duplique este Space" in pt


def test_runs_go_to_persistent_storage_when_the_space_has_it(monkeypatch, tmp_path):
    data = tmp_path / "data"
    monkeypatch.setattr(refs, "SPACE_DATA_DIR", data)
    monkeypatch.setattr(space, "SPACE_DATA_DIR", data)
    monkeypatch.delenv("COMPACT_LAB_RUNS", raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/compact-llm-lab")
    monkeypatch.chdir(tmp_path)
    assert refs.default_runs_dir() == (tmp_path / "runs").resolve()  # no /data: ./runs (lost at a restart)
    assert space.storage_notice_key(refs.default_runs_dir()) == "space.storage.ephemeral"
    data.mkdir()
    assert refs.default_runs_dir() == (data / "runs").resolve()
    assert space.storage_notice_key(refs.default_runs_dir()) == "space.storage.persistent"
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path / "mine"))  # the owner's choice wins
    assert refs.default_runs_dir() == Path(tmp_path / "mine").resolve()
    monkeypatch.delenv("COMPACT_LAB_RUNS")
    monkeypatch.delenv("SPACE_ID")
    assert refs.default_runs_dir() == (tmp_path / "runs").resolve()  # /data of another machine is not a Space's storage
