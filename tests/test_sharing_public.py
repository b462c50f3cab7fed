"""Public links, round two (issue 25), below the UI: every way gradio publishes the app counts as shared and gets an
explicit `share` and a login; the one gate for what a visitor names (engine/refs.py) at the engine functions every entry
goes through; no server token in any Hub call made for a visitor, in the app or in a training process; a training
process's environment built from an allow-list; the exports folder under an unpredictable name."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import sharing
from engine.config import TrainConfig
from engine.errors import ConfigError, EngineError

REPO = Path(__file__).resolve().parents[1]
SECRETS = {"COMPACT_LAB_AUTH": "ana:owner-password", "AWS_SECRET_ACCESS_KEY": "aws-secret", "OPENAI_API_KEY": "sk-secret",
           "GITHUB_TOKEN": "ghp_secret", "DATABASE_URL": "postgres://u:p@db/x", "HF_TOKEN": "hf_FAKEserverTOKEN000"}


@pytest.fixture
def shared(monkeypatch):
    monkeypatch.setenv(sharing.SHARED_ENV, "1")
    monkeypatch.setenv(sharing.OWNER_TOKEN_ENV, "0")


# ---- 1. every way gradio publishes the app ---------------------------------------------------------------------

AUTO = [  # (id, share flag, env, colab, SageMaker folder exists, shared, share passed to launch, login generated)
    ("gradio-share-env", None, {"GRADIO_SHARE": "true"}, False, False, True, True, True),
    ("gradio-share-env-caps", None, {"GRADIO_SHARE": "True"}, False, False, True, True, True),
    ("kaggle", None, {"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, False, False, True, True, True),
    ("sagemaker", None, {}, False, True, True, True, True),
    ("colab", None, {}, True, False, True, True, True),
    ("explicit-share", True, {}, False, False, True, True, True),
    ("space", None, {"SPACE_ID": "me/lab", "GRADIO_SHARE": "true"}, False, False, True, False, False),
    ("kaggle-no-share", False, {"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, False, False, False, False, False),
    ("local", None, {"GRADIO_SHARE": "false"}, False, False, False, False, False),
]


@pytest.mark.parametrize(("share", "env", "colab", "sagemaker", "is_shared", "share_arg", "login"), [a[1:] for a in AUTO], ids=[a[0] for a in AUTO])
def test_every_auto_shared_environment_is_shared_with_an_explicit_share_and_a_login(tmp_path, share, env, colab, sagemaker, is_shared,
                                                                                      share_arg, login):
    folder = tmp_path / "SageMaker"
    if sagemaker:
        folder.mkdir()
    decision = sharing.decide(share=share, host="127.0.0.1", env=env, colab=colab, sagemaker_dir=folder)
    assert decision.shared is is_shared and bool(decision.reasons) is is_shared
    assert decision.share is share_arg  # always a bool: gradio's launch(share=None) rules never decide on top
    assert sharing.default_login(decision) is login


def test_a_non_loopback_host_is_shared_but_opens_no_link():
    decision = sharing.decide(share=None, host="0.0.0.0", env={}, colab=False, sagemaker_dir=Path("/nonexistent"))
    assert decision.shared and decision.share is False and not sharing.default_login(decision)


def test_hosted_notebooks_are_recognised_as_installed_gradio_recognises_them(monkeypatch, tmp_path):
    gradio_utils = pytest.importorskip("gradio.utils")
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    assert bool(sharing.hosted_notebook()) == gradio_utils.is_hosted_notebook()
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    assert sharing.hosted_notebook() == "Kaggle" and gradio_utils.is_hosted_notebook()
    assert sharing.SAGEMAKER_DIR == Path("/home/ec2-user/SageMaker")  # the folder gradio/utils.py looks for


def test_mcp_with_a_login_is_refused_naming_the_gradio_code():
    with pytest.raises(EngineError, match="gradio/mcp.py") as err:
        sharing.check_mcp_login(True, ("ana", "pw"))
    assert "_get_or_create_client" in str(err.value) and "--no-auth" in str(err.value)
    sharing.check_mcp_login(True, None)
    sharing.check_mcp_login(False, ("ana", "pw"))


# ---- 2. a training process's environment: an allow-list ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["local", "shared"])
def test_a_training_process_gets_no_secret_of_the_server(monkeypatch, mode):
    monkeypatch.setenv(sharing.SHARED_ENV, "1" if mode == "shared" else "0")
    monkeypatch.setenv(sharing.OWNER_TOKEN_ENV, "0")
    kept = {"PATH": "/bin", "HOME": "/home/u", "HF_HOME": "/hf", "CUDA_VISIBLE_DEVICES": "0", "COMPACT_LAB_RUNS": "/runs", "LC_ALL": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "PYTHONPATH": "/app"}
    env = sharing.child_env({**kept, **SECRETS})
    for key in ("COMPACT_LAB_AUTH", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "DATABASE_URL"):
        assert key not in env
    assert {k: env[k] for k in kept} == kept
    assert env[sharing.SHARED_ENV] == ("1" if mode == "shared" else "0")  # the child applies the same policy
    assert ("HF_TOKEN" in env) is (mode == "local") and (env.get("HF_HUB_DISABLE_IMPLICIT_TOKEN") == "1") is (mode == "shared")


def test_the_job_managers_child_gets_the_allow_listed_environment(shared, monkeypatch, tmp_path):
    from engine.training.jobs import JobManager

    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "child-env.txt"
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nenv > {out}.tmp && mv {out}.tmp {out}\n")
    fake_python.chmod(fake_python.stat().st_mode | stat.S_IEXEC)
    JobManager(tmp_path / "runs", python=str(fake_python)).start(TrainConfig(run_name="r1", base_model="builtin:compact-mini",
                                                                             dataset="builtin:dates"), owner="key")
    deadline = time.time() + 10
    while time.time() < deadline and not out.exists():
        time.sleep(0.05)
    child = out.read_text()
    assert "COMPACT_LAB_SHARED=1" in child and "HF_HUB_DISABLE_IMPLICIT_TOKEN=1" in child
    for value in SECRETS.values():
        assert value not in child


# ---- 3. no server token in any Hub call for a visitor, in every process -------------------------------------------

def _fake_download(calls: list, tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama"}))

    def download(repo_id, filename, **kwargs):
        calls.append(kwargs)
        return str(config)

    return download


def test_model_type_of_never_sends_the_server_token_for_a_visitor(shared, monkeypatch, tmp_path):
    import huggingface_hub

    from engine.models.references import model_type_of

    calls: list = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _fake_download(calls, tmp_path))
    assert model_type_of("someone/private-model", tmp_path) == "llama"
    assert calls and all(kw.get("token") is False for kw in calls)


def test_a_training_process_of_a_shared_app_never_sends_the_server_token(shared, tmp_path):
    """The same call made inside a child process started with the app's child environment (as JobManager starts runs)."""
    script = ("import json, sys, huggingface_hub\n"
              "calls = []\n"
              "def download(repo_id, filename, **kw):\n"
              "    calls.append({k: v for k, v in kw.items() if k == 'token'})\n"
              f"    return {str(tmp_path / 'config.json')!r}\n"
              "huggingface_hub.hf_hub_download = download\n"
              "from pathlib import Path\n"
              "from engine.models.references import model_type_of\n"
              f"print(json.dumps([model_type_of('someone/private-model', Path({str(tmp_path)!r})), calls]))\n")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    env = sharing.child_env({**os.environ, **SECRETS})
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    model_type, calls = json.loads(done.stdout.strip().splitlines()[-1])
    assert model_type == "qwen2" and calls == [{"token": False}]


# ---- 4. the exports folder ---------------------------------------------------------------------------------------

def test_the_exports_folder_has_an_unpredictable_private_name():
    import tempfile

    from engine.views.uploads import export_path, exports_root

    root = exports_root()
    assert root.name != f"compact-lab-exports-{os.getuid()}" and root.name.startswith("compact-lab-exports-")
    assert len(root.name) > len("compact-lab-exports-") + 6 and Path(tempfile.gettempdir()) == root.parent
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and export_path("x", ".zip").parent.parent == root


# ---- 5. the gate at the engine functions every entry goes through -------------------------------------------------

def _upload(runs: Path, session: str, name: str, data: dict) -> Path:
    from engine.views.uploads import session_dir

    folder = session_dir(runs / "_uploads", session)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{'0' * 20}-{name}"
    path.write_text(json.dumps(data))
    return path


TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 256, "_name_or_path": "owner/PRIVATE-model-on-drive"}


def test_the_estimator_refuses_a_server_config_alike_whether_it_exists(shared, tmp_path):
    from engine.config import MemoryQuery
    from engine.estimator import memory
    from engine.refs import visitor_scope

    drive = tmp_path / "drive" / "private-model"
    drive.mkdir(parents=True)
    (drive / "config.json").write_text(json.dumps(TINY))
    answers = []
    for path in (drive / "config.json", tmp_path / "drive" / "no-such" / "config.json"):
        with pytest.raises(ConfigError) as err:
            memory.estimate(MemoryQuery(model=str(path)))
        answers.append(str(err.value).replace(str(path), "<path>").replace(str(path)[:77] + "...", "<path>"))  # whole or shortened
    assert answers[0] == answers[1] and "uploaded through the form" in answers[0] and "PRIVATE" not in answers[0]
    mine, theirs = _upload(tmp_path / "runs", "alice", "config.json", TINY), _upload(tmp_path / "runs", "bob", "bob.json", TINY)
    from engine.views.uploads import session_dir

    with visitor_scope(session_dir(tmp_path / "runs" / "_uploads", "alice")):
        assert memory.estimate(MemoryQuery(model=str(mine))).params > 0  # her own upload
        with pytest.raises(ConfigError, match="uploaded through the form"):
            memory.estimate(MemoryQuery(model=str(theirs)))  # another session's
    with visitor_scope(None), pytest.raises(ConfigError, match="uploaded through the form"):  # an MCP caller: no uploads
        memory.estimate(MemoryQuery(model=str(mine)))


def test_a_hub_style_name_is_never_looked_up_on_the_servers_disk_when_shared(shared, tmp_path, monkeypatch):
    from engine.estimator import model_config

    (tmp_path / "owner" / "secret").mkdir(parents=True)
    (tmp_path / "owner" / "secret" / "config.json").write_text(json.dumps(TINY))
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(model_config, "_from_hub", lambda repo: seen.append(repo) or (_ for _ in ()).throw(EngineError("hub")))
    model_config._resolve_cached.cache_clear()
    with pytest.raises(EngineError, match="hub"):
        model_config.resolve("owner/secret")  # a folder of that name exists here: still a Hub id, never read from disk
    assert seen == ["owner/secret"]


@pytest.mark.parametrize(("field", "value"), [("dataset", "/etc/passwd.jsonl"), ("eval_dataset", "/etc/hosts.jsonl"),
                                              ("dataset", "_uploads/../../x.jsonl"), ("base_model", "/srv/models/private"),
                                              ("teacher_model", "~/models/teacher")])
def test_a_job_naming_a_server_path_is_refused_wherever_it_starts(shared, tmp_path, field, value):
    from engine.refs import check_visitor_refs
    from engine.training.jobs import JobManager

    with pytest.raises(ConfigError, match=field):
        check_visitor_refs({field: value})
    jobs = JobManager(tmp_path / "runs", python="/bin/false")
    cfg = TrainConfig(run_name="probe", base_model="builtin:compact-mini", dataset="builtin:dates")
    object.__setattr__(cfg, field, value)  # as an entry that skipped its own checks would pass it
    with pytest.raises(ConfigError, match=field):
        jobs.start(cfg)
    assert not (tmp_path / "runs" / "probe").exists()
