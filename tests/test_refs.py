"""Reference grammar and path policy (engine/refs.py): accept and reject cases for every rule, with the
messages callers show. The rules differ on purpose (see the module docstring); these cases pin each one."""

from __future__ import annotations

import os

import pytest

from engine import refs
from engine.errors import ConfigError, ModelLoadError

# ---- run and built-in names ----------------------------------------------------------------------

RUN_NAMES_OK = ["lora-1", "a", "A.b_c-9", "compact-mini", "a" * 100]
RUN_NAMES_BAD = ["", "../x", "..", "a..b", "/etc", "a/b", ".hidden", "-x", "_x", "a b", "a:b", "a\\b", "a" * 101, "é"]


@pytest.mark.parametrize("name", RUN_NAMES_OK)
def test_run_names_accepted(name):
    assert refs.is_valid_run_name(name)


@pytest.mark.parametrize("name", [*RUN_NAMES_BAD, None])
def test_run_names_rejected(name):
    assert not refs.is_valid_run_name(name)


def test_run_ref_dir_names_the_folder_or_says_why_not(tmp_path):
    assert refs.run_ref_dir("lora-1", tmp_path) == tmp_path / "lora-1"
    for bad in ("../x", "a/b", "..", ".hidden"):
        with pytest.raises(ModelLoadError, match="is not valid: a run is named by its folder inside the runs directory"):
            refs.run_ref_dir(bad, tmp_path)


@pytest.mark.parametrize("name", ["compact-mini", "lora-1", "a" * 500])
def test_plain_names_accepted(name):
    assert refs.is_plain_name(name)  # no length cap at the browser boundary: the loader caps it


@pytest.mark.parametrize("name", ["", "../x", "..", "a..b", "a/b", ".hidden", "a b", "-x"])
def test_plain_names_rejected(name):
    assert not refs.is_plain_name(name)


@pytest.mark.parametrize("ref", ["builtin:x", "builtin:compact-mini", "run:lora-1", "run:a..b"])
def test_named_model_refs_a_card_may_publish(ref):
    assert refs.NAMED_MODEL_REF_RE.match(ref)


@pytest.mark.parametrize("ref", ["run:a/merged", "hub:owner/name", "builtin:", "run:../x", "run:.x", "model:x", "gpt2", "/etc/x"])
def test_named_model_refs_rejected(ref):
    assert not refs.NAMED_MODEL_REF_RE.match(ref)


@pytest.mark.parametrize("name", ["run-1", "v1.0", "a..b", "ünïcode", "_x"])
def test_folder_safe_names_accepted(name):
    assert refs.is_folder_safe_name(name)


@pytest.mark.parametrize("name", [".hidden", "../escape", "a/b", "a b", "a:b"])
def test_folder_safe_names_rejected(name):
    assert not refs.is_folder_safe_name(name)


def test_prefixes():
    assert (refs.BUILTIN_PREFIX, refs.RUN_PREFIX, refs.MERGED_SUFFIX, refs.HUB_PREFIX) == ("builtin:", "run:", "/merged", "hub:")


# ---- the runs folder and path containment --------------------------------------------------------


def test_default_runs_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path / "my-runs"))
    path = refs.default_runs_dir()
    assert path == (tmp_path / "my-runs").resolve() and path.is_dir()


def test_is_within(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    runs = tmp_path / "runs"
    assert refs.is_within(runs / "a", runs)
    assert refs.is_within(runs, runs)
    assert not refs.is_within(runs / ".." / "x", runs)
    assert not refs.is_within(tmp_path, runs)


@pytest.mark.skipif(os.name == "nt", reason="symlinks need privileges on Windows")
def test_is_within_follows_symlinks(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "link").symlink_to(tmp_path)
    assert not refs.is_within(runs / "link", runs)


def test_path_exists_never_raises(tmp_path):
    assert refs.path_exists(tmp_path)
    assert not refs.path_exists(tmp_path / "missing")
    assert not refs.path_exists(tmp_path / "nul\0byte")
    assert not refs.path_exists(tmp_path / ("x" * 5000))


# ---- Hugging Face model ids ----------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["gpt2", "Qwen/Qwen2.5-0.5B", "a" * 96, "a" * 96 + "/" + "b" * 96, "owner/model_v1.2"])
def test_hub_model_ids_accepted(ref):
    assert refs.HUB_MODEL_ID_RE.match(ref)


@pytest.mark.parametrize("ref", ["", "a" * 97, "a/" + "b" * 97, "a/b/c", "../x", "/x", "owner/", "al ice/x", "builtin:x", "-a/b", "a/-b"])
def test_hub_model_ids_rejected(ref):
    assert not refs.HUB_MODEL_ID_RE.match(ref)


@pytest.mark.parametrize("ref", ["tatsu-lab/alpaca", "a/b", "a" * 96 + "/" + "b" * 96])
def test_owner_name_ids_accepted(ref):
    assert refs.HUB_OWNER_NAME_RE.match(ref)


@pytest.mark.parametrize("ref", ["alpaca", "gpt2", "a/b/c", "alice/-bad", "alice/" + "x" * 97, "al ice/x", "../x", ""])
def test_owner_name_ids_rejected(ref):
    assert not refs.HUB_OWNER_NAME_RE.match(ref)


@pytest.mark.parametrize("ref", ["Qwen/Qwen2.5-0.5B", "owner/_name", "owner/" + "x" * 200, "ow_ner/naïve"])
def test_loose_hub_ids_accepted(ref):
    assert refs.LOOSE_HUB_ID_RE.match(ref)


@pytest.mark.parametrize("ref", ["gpt2", "a/b/c", "./x/y", "owner/", "/x", "o w/x"])
def test_loose_hub_ids_rejected(ref):
    assert not refs.LOOSE_HUB_ID_RE.match(ref)


# ---- Hub datasets --------------------------------------------------------------------------------


def test_is_hub_ref():
    assert refs.is_hub_ref("hub:a/b") and refs.is_hub_ref("  hub:a/b")
    assert not refs.is_hub_ref("builtin:dates") and not refs.is_hub_ref("") and not refs.is_hub_ref(None)


@pytest.mark.parametrize("ref,name", [("hub:tatsu-lab/alpaca", "tatsu-lab/alpaca"), (" hub: a/b ", "a/b")])
def test_hub_dataset_refs_accepted(ref, name):
    assert refs.check_hub_ref(ref) == name


@pytest.mark.parametrize("ref", ["hub:alpaca", "hub:../etc", "hub:a", "hub:a/b..c", "hub:a/b/c", "hub:", "hub:al ice/x"])
def test_hub_dataset_refs_rejected(ref):
    with pytest.raises(ConfigError, match="eval_dataset.*hub:owner/name as in the dataset's Hub address"):
        refs.check_hub_ref(ref, "eval_dataset")


@pytest.mark.parametrize("split", ["train", "train[:10%]", "train[10%:20%]", "train+test", "validation[100:200]", "train[-200:]"])
def test_splits_accepted(split):
    assert refs.check_split(f" {split} ") == split


@pytest.mark.parametrize("split", ["train[:10", "test; rm", "", "a b", "train[:2]x"])
def test_splits_rejected(split):
    with pytest.raises(ConfigError, match="eval_split.*a split name such as train or test"):
        refs.check_split(split, "eval_split")


@pytest.mark.parametrize("name,out", [("", ""), (None, ""), ("en", "en"), (" default ", "default"), ("x" * 128, "x" * 128)])
def test_hub_configs_accepted(name, out):
    assert refs.check_hub_config(name) == out


@pytest.mark.parametrize("name", ["../x", "a b", "x" * 129, "-en"])
def test_hub_configs_rejected(name):
    with pytest.raises(ConfigError, match="hub_config.*configuration \\(subset\\)"):
        refs.check_hub_config(name)


def test_parse_columns():
    assert refs.parse_columns("instruction=Question, output = answer,") == {"instruction": "question", "output": "answer"}
    assert refs.parse_columns("") == {}
    assert refs.parse_columns({"Text": "Body"}) == {"text": "body"}
    with pytest.raises(ConfigError, match="targets among text, instruction.*'answer' is not one of them"):
        refs.parse_columns("answer=output")
    with pytest.raises(ConfigError, match="no target=source"):
        refs.parse_columns("question")
    with pytest.raises(ConfigError, match=r"mix instruction \+ text"):
        refs.parse_columns("text=body, output=answer")
    with pytest.raises(ConfigError, match="given twice"):
        refs.parse_columns("text=a, text=b")
