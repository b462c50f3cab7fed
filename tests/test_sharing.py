"""Shared mode (engine/sharing.py): when an app counts as shared, and what it changes below the UI: no remote code, no
model folders, no server Hub token in visitors' loads or in a training subprocess, Hub models sized before a download."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest

from engine import sharing
from engine.config import TrainConfig
from engine.errors import ConfigError, EngineError

FAKE = "hf_FAKEserverTOKEN000"


@pytest.mark.parametrize(("share", "host", "env", "colab", "shared"), [
    (False, "127.0.0.1", {}, False, False),
    (False, "localhost", {}, False, False),
    (False, "::1", {}, False, False),
    (True, "127.0.0.1", {}, False, True),
    (False, "0.0.0.0", {}, False, True),
    (False, "192.168.1.5", {}, False, True),
    (False, "my-laptop.lan", {}, False, True),
    (False, "127.0.0.1", {"SPACE_ID": "me/lab"}, False, True),
    (False, "127.0.0.1", {}, True, True),
    (False, "127.0.0.1", {"COMPACT_LAB_SHARED": "1"}, False, True),
], ids=["loopback", "localhost", "ipv6-loopback", "share", "all-interfaces", "lan-ip", "host-name", "space", "colab", "forced"])
def test_what_counts_as_shared(share, host, env, colab, shared):
    decision = sharing.decide(share=share, host=host, env=env, colab=colab)
    assert decision.shared is shared and bool(decision.reasons) is shared


def test_colab_is_recognised_from_its_environment(monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-1")
    assert sharing.on_colab()


@pytest.fixture
def shared(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", FAKE)
    monkeypatch.setenv(sharing.SHARED_ENV, "1")
    monkeypatch.setenv(sharing.OWNER_TOKEN_ENV, "0")


def test_activate_records_the_decision_for_children(monkeypatch):
    monkeypatch.setenv(sharing.SHARED_ENV, "0")  # both restored after the test
    monkeypatch.setenv(sharing.OWNER_TOKEN_ENV, "0")
    sharing.activate(True, owner_token=False)
    assert sharing.is_shared() and os.environ[sharing.SHARED_ENV] == "1" and sharing.hub_token() is False
    sharing.activate(True, owner_token=True)
    assert sharing.owner_token_allowed() and sharing.hub_token() is None and sharing.token_kwargs() == {}
    sharing.activate(False, owner_token=True)  # the opt-in means nothing on a local app
    assert not sharing.is_shared() and not sharing.owner_token_allowed()


def test_no_token_for_visitors_nor_in_a_training_subprocess(shared, monkeypatch):
    assert sharing.token_kwargs() == {"token": False}
    env = sharing.child_env({"HF_TOKEN": FAKE, "HUGGING_FACE_HUB_TOKEN": FAKE, "PATH": "/bin"})
    assert env == {"PATH": "/bin", sharing.SHARED_ENV: "1", sharing.OWNER_TOKEN_ENV: "0", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}
    monkeypatch.setenv(sharing.OWNER_TOKEN_ENV, "1")  # --share-owner-token
    assert sharing.child_env({"HF_TOKEN": FAKE})["HF_TOKEN"] == FAKE


def test_a_local_app_keeps_the_libraries_defaults(monkeypatch):
    monkeypatch.delenv(sharing.SHARED_ENV, raising=False)
    assert sharing.hub_token() is None and sharing.token_kwargs() == {} and sharing.child_env({"HF_TOKEN": FAKE})["HF_TOKEN"] == FAKE
    assert TrainConfig(trust_remote_code=True).trust_remote_code


def test_trust_remote_code_and_model_folders_are_refused_when_shared(shared, tmp_path):
    from engine.estimator.handoff import check_ui_model_ref

    with pytest.raises(ConfigError, match="trust_remote_code = True is not allowed: off on a shared app"):
        TrainConfig(trust_remote_code=True)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="model folders on the server's disk are not available on a shared app"):
        check_ui_model_ref(str(tmp_path), tmp_path, allow_local=True)


def test_model_loads_never_send_the_server_token_when_shared(shared, monkeypatch, tmp_path):
    import transformers

    from engine.errors import ModelLoadError
    from engine.models.loading import load_model, load_tokenizer

    seen = []

    def refuse(location, **kwargs):
        seen.append(kwargs)
        raise OSError("offline")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    for load in (load_model, load_tokenizer):
        with pytest.raises(ModelLoadError):
            load("someone/private-model", runs_dir=tmp_path)
    assert [kw["token"] for kw in seen] == [False, False] and all(not kw["trust_remote_code"] for kw in seen)
    with pytest.raises(ConfigError, match="trust_remote_code"):
        load_model("someone/private-model", runs_dir=tmp_path, trust_remote_code=True)
    assert len(seen) == 2  # refused before from_pretrained


def test_a_training_subprocess_gets_no_token_when_shared(shared, tmp_path):
    from engine.training.jobs import JobManager

    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nenv > {tmp_path / 'child-env.txt'}\n")
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IEXEC)
    jobs = JobManager(tmp_path / "runs", python=str(fake_python))
    assert jobs.owner_only  # shared mode: only the session that started a run controls it
    jobs.start(TrainConfig(run_name="r1", base_model="builtin:compact-mini", dataset="builtin:dates"), owner="key")
    for _ in range(100):
        if (tmp_path / "child-env.txt").exists() and "PATH=" in (tmp_path / "child-env.txt").read_text():
            break
        import time

        time.sleep(0.05)
    child = (tmp_path / "child-env.txt").read_text()
    assert "COMPACT_LAB_SHARED=1" in child and FAKE not in child and "HF_TOKEN" not in child


def _api(sizes):
    files = [SimpleNamespace(rfilename=name, size=size) for name, size in sizes.items()]
    return SimpleNamespace(model_info=lambda ref, files_metadata, token: SimpleNamespace(siblings=files) if token is False else 1 / 0)


def test_hub_models_are_sized_from_their_listing_before_a_download(shared, monkeypatch):
    from engine.views.playground_load import check_hub_model_size

    monkeypatch.setenv(sharing.MAX_MODEL_ENV, "2")
    assert check_hub_model_size("someone/small", _api({"model.safetensors": 2**30, "README.md": 10**12})) == pytest.approx(1.0)
    with pytest.raises(EngineError, match=r"someone/big has 12.0 GiB of weight files; this shared app loads Hub models up to 2.0 GiB"):
        check_hub_model_size("someone/big", _api({"model-1.safetensors": 6 * 2**30, "model-2.safetensors": 6 * 2**30}))
    assert check_hub_model_size("builtin:compact-mini", _api({})) is None
    monkeypatch.setenv(sharing.MAX_MODEL_ENV, "lots")
    with pytest.raises(ConfigError, match="COMPACT_LAB_MAX_MODEL_GIB"):
        sharing.max_model_gib()
    monkeypatch.delenv(sharing.MAX_MODEL_ENV)
    assert sharing.max_model_gib() >= 1.0  # half the host's memory


def test_a_local_app_does_not_size_hub_models(monkeypatch):
    from engine.views.playground_load import check_hub_model_size

    monkeypatch.delenv(sharing.SHARED_ENV, raising=False)
    assert check_hub_model_size("someone/big", _api({"model.safetensors": 10**15})) is None
