"""Pushing a run to the Hub (engine/export/hub.py, its model card engine/export/card.py, `python -m engine push`, the app's
/push_to_hub), offline.

The Hub is never contacted: `engine.export.hub._hf_api` is replaced by a fake that records create_repo /
upload_folder and copies the uploaded folder (following its symlinks, as upload_folder does) so the files
that would have been pushed can be checked: adapter/model files, the model card, no local path, no token.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import shutil
from pathlib import Path

import httpx2
import pytest
import yaml
from conftest import CPU, build_tiny_model, finish_run, make_adapter_run
from huggingface_hub.errors import HfHubHTTPError

from engine.config import LoraSettings, TrainConfig
from engine.errors import ConfigError, HubError
from engine.export import hub as hub_push
from engine.export.card import model_card
from engine.export.hub import push_run
from engine.export.merge import merge_adapter
from engine.models.references import builtin_model_dir
from engine.runs import read_events

TOKEN = "hf_TestSecretToken0123456789abcdefXYZ"


class FakeHub:
    """Stands in for huggingface_hub.HfApi: records calls, keeps a copy of each uploaded folder."""

    def __init__(self, root: Path, fail: BaseException | None = None) -> None:
        self.root, self.fail = root, fail
        self.tokens: list[str] = []
        self.calls: list[tuple[str, dict]] = []
        self.uploads: list[Path] = []

    def __call__(self, token: str) -> FakeHub:  # the factory hub_push._hf_api(token)
        self.tokens.append(token)
        return self

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kw}))
        if self.fail is not None:
            raise self.fail
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, **kw):
        self.calls.append(("upload_folder", {"repo_id": repo_id, "folder_path": folder_path, **kw}))
        dest = self.root / f"upload-{len(self.uploads)}"
        shutil.copytree(folder_path, dest)  # symlinks=False: copies what they point to, like the real upload
        self.uploads.append(dest)

    def files(self, i: int = -1) -> set[str]:
        return {p.relative_to(self.uploads[i]).as_posix() for p in self.uploads[i].rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", steps=0)  # untrained: only files are checked here


@pytest.fixture()
def runs(tmp_path, tiny_dir) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(tiny_dir, builtin_model_dir("compact-mini", runs))
    return runs


@pytest.fixture()
def hub(tmp_path, monkeypatch) -> FakeHub:
    fake = FakeHub(tmp_path / "hub")
    monkeypatch.setattr(hub_push, "_hf_api", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # conftest sets 1; the fake needs no network anyway
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return fake


def adapter_run(runs: Path, name: str = "r1", **cfg_kw) -> Path:
    make_adapter_run(runs, name=name, method=cfg_kw.get("method", "qlora"))
    cfg = TrainConfig(**{"method": "qlora", "base_model": "builtin:compact-mini", "dataset": "builtin:dates", "max_steps": 2,
                         "lora": LoraSettings(r=4, alpha=8), "run_name": name, **cfg_kw})
    finish_run(runs / name, cfg)
    return runs / name


def digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def assert_nowhere(needle: str, folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            assert needle.encode() not in p.read_bytes(), f"{needle!r} found in {p}"


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


# --------------------------------------------------------------------------------------------------


def test_push_adapter_uploads_adapter_and_card_without_token_or_local_paths(runs, hub, caplog):
    caplog.set_level(logging.DEBUG)
    run = adapter_run(runs)
    before = digests(run)
    url = push_run(run, "alice/dates-qlora", what="adapter", token=TOKEN)

    assert url == "https://huggingface.co/alice/dates-qlora"
    assert hub.tokens == [TOKEN]
    (c1, create), (c2, upload) = hub.calls
    assert c1 == "create_repo" and create == {"repo_id": "alice/dates-qlora", "private": True, "exist_ok": True, "repo_type": "model"}
    assert c2 == "upload_folder" and upload["delete_patterns"] == "*"  # the repo mirrors the pushed folder
    # The calls are valid for the real client (the fake would accept any keyword).
    from huggingface_hub import HfApi

    inspect.signature(HfApi.create_repo).bind(None, **create)
    inspect.signature(HfApi.upload_folder).bind(None, **upload)
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "README.md"} <= hub.files()
    up = hub.uploads[0]
    assert (up / "adapter_model.safetensors").read_bytes() == (run / "adapter" / "adapter_model.safetensors").read_bytes()
    assert json.loads((up / "adapter_config.json").read_text())["base_model_name_or_path"] == "builtin:compact-mini"

    card = (up / "README.md").read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "peft" and "base_model" not in meta and "license" not in meta
    assert {"compact-llm-lab", "qlora", "lora", "peft"} <= set(meta["tags"])
    for fragment in ("QLoRA adapter", "not on the Hugging Face Hub", "built-in sample `dates`", "r = 4, alpha = 8",
                     "4-bit nf4, double quantization", "| best eval loss | 1.2500 |", "| eval perplexity | 3.49 |",
                     "before 10% → after 85%", "| training time | 1m 35s |", "3.05 GiB (torch max allocated)", "| 3.21 GiB |",
                     "Tesla T4 (cuda)", "PeftModel.from_pretrained(base, \"alice/dates-qlora\")", "import engine.models.compact"):
        assert fragment in card, fragment

    # No local path and no token in anything that left, nor in the run folder or the logs.
    assert_nowhere(str(runs.parent), up)
    assert_nowhere(TOKEN, up)
    assert_nowhere(TOKEN, run)
    assert TOKEN not in caplog.text
    # The run folder is untouched except for one "push" event.
    after = digests(run)
    assert {k: v for k, v in after.items() if k != "events.jsonl"} == {k: v for k, v in before.items() if k != "events.jsonl"}
    push = read_events(run)[-1]
    assert push["type"] == "push" and push["repo"] == "alice/dates-qlora" and push["what"] == "adapter" and push["url"] == url
    assert not list(Path(hub_push.tempfile.gettempdir()).glob("compact-push-*"))  # staging removed


def test_card_for_a_hub_base_and_hub_dataset(runs, hub, monkeypatch):
    run = adapter_run(runs, "r-hub", method="lora", base_model="Qwen/Qwen2.5-0.5B", dataset="hub:tatsu-lab/alpaca", hub_split="train[:1%]")
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the CLI's way: token from the environment
    push_run(run, "https://huggingface.co/alice/qwen-alpaca", private=False, license="apache-2.0")  # a pasted address works
    assert hub.tokens == [TOKEN] and hub.calls[0][1]["private"] is False and hub.calls[0][1]["repo_id"] == "alice/qwen-alpaca"
    card = (hub.uploads[0] / "README.md").read_text()
    meta = front_matter(card)
    assert meta["base_model"] == "Qwen/Qwen2.5-0.5B" and meta["datasets"] == ["tatsu-lab/alpaca"] and meta["license"] == "apache-2.0"
    assert 'AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")' in card and "import engine.models.compact" not in card
    assert "not on the Hugging Face Hub" not in card and "split `train[:1%]`" in card
    assert json.loads((hub.uploads[0] / "adapter_config.json").read_text())["base_model_name_or_path"] == "Qwen/Qwen2.5-0.5B"


def test_uploaded_dataset_and_local_base_never_show_their_paths(runs, tmp_path):
    data = tmp_path / "secret-place" / "my-data.jsonl"
    data.parent.mkdir()
    data.write_text('{"instruction": "a", "output": "b"}\n')
    make_adapter_run(runs, name="r-local")
    cfg = TrainConfig(method="lora", base_model=str(tmp_path / "secret-place" / "base"), dataset=str(data), eval_dataset=str(data))
    finish_run(runs / "r-local", cfg)
    card = model_card(runs / "r-local", "adapter", "alice/x")
    assert str(tmp_path) not in card and "secret-place" not in card
    assert "an uploaded file `my-data.jsonl`" in card and "a local model folder (not on the Hub)" in card


def test_merged_needs_a_merge_first_then_pushes_a_plain_model(runs, hub):
    run = adapter_run(runs, "r-merge")
    with pytest.raises(HubError, match="not been merged yet.*Merge adapter"):
        push_run(run, "alice/m", what="merged", token=TOKEN)
    assert hub.calls == []
    push_run(run, "alice/m", what="merged", token=TOKEN, merge=True)  # merges (CPU here), then pushes
    assert (run / "merged" / "model.safetensors").exists()
    assert {"config.json", "model.safetensors", "tokenizer.json", "merge_info.json", "README.md"} <= hub.files()
    assert "adapter_config.json" not in hub.files()
    info = json.loads((hub.uploads[0] / "merge_info.json").read_text())
    assert info["base_model"] == "builtin:compact-mini" and str(runs) not in json.dumps(info)
    card = (hub.uploads[0] / "README.md").read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "transformers" and "merged-lora" in meta["tags"]
    assert 'AutoModelForCausalLM.from_pretrained("alice/m")' in card and "import engine.models.compact" in card and "PeftModel" not in card
    # merged on a CPU in its auto dtype: bf16 where the CPU is fast at it (engine/hardware/cpu_bf16.py), else fp32
    assert "with the adapter merged into a float32 copy of the base" in card or "with the adapter merged into a bfloat16 copy of the base" in card
    assert_nowhere(str(runs.parent), hub.uploads[0])

    # A re-trained adapter makes the merged copy stale: refused until merged again.
    import os
    import time

    later = time.time() + 10
    os.utime(run / "adapter" / "adapter_model.safetensors", (later, later))
    with pytest.raises(HubError, match="older than its adapter"):
        push_run(run, "alice/m", what="merged", token=TOKEN)
    merge_adapter(run, device=CPU)
    os.utime(run / "adapter" / "adapter_model.safetensors", (time.time() - 100, time.time() - 100))
    push_run(run, "alice/m", what="merged", token=TOKEN)


def test_full_run_pushes_its_model_and_refuses_adapter(runs, hub, tiny_dir):
    run = runs / "full-1"
    shutil.copytree(tiny_dir, run / "model")
    finish_run(run, TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:instructions"))
    with pytest.raises(HubError, match="trained every weight.*what = model"):
        push_run(run, "alice/full", what="adapter", token=TOKEN)
    assert push_run(run, "alice/full", token=TOKEN).endswith("alice/full")  # what=None: the run's own output
    assert {"config.json", "model.safetensors", "README.md"} <= hub.files()
    card = (hub.uploads[0] / "README.md").read_text()
    assert "A full fine-tune (every weight trained) of the built-in compact model" in card and front_matter(card)["library_name"] == "transformers"
    with pytest.raises(HubError, match="is a LoRA adapter"):
        push_run(adapter_run(runs, "r-a"), "alice/x", what="model", token=TOKEN)
    scratch = runs / "scratch-1"
    shutil.copytree(tiny_dir, scratch / "model")
    finish_run(scratch, TrainConfig(method="scratch", base_model="builtin:compact-mini", dataset="builtin:corpus"))
    card = model_card(scratch, "model", "alice/tiny")
    assert "trained from random weights on the built-in sample `corpus`" in card and "the built-in preset `compact-mini`" in card
    assert "base_model" not in front_matter(card)


def test_unfinished_run_and_missing_run(runs, hub):
    make_adapter_run(runs, name="busy")
    finish_run(runs / "busy", TrainConfig(method="lora"), done=False)
    with pytest.raises(HubError, match="not finished"):
        push_run(runs / "busy", "alice/busy", token=TOKEN)
    with pytest.raises(HubError, match="no run 'ghost'"):
        push_run(runs / "ghost", "alice/ghost", token=TOKEN)
    assert hub.calls == [] and hub.tokens == []


@pytest.mark.parametrize("repo", ["just-a-name", "a/b/c", "alice/-bad", "alice/bad..name", "../x", "", "alice/" + "x" * 97, "al ice/x"])
def test_bad_repo_ids_are_refused_before_anything_else(runs, hub, repo):
    with pytest.raises(ConfigError, match="repo_id.*owner/name"):
        push_run(runs / "does-not-matter", repo, token=TOKEN)
    assert hub.calls == []


def test_missing_token_and_a_bad_what(runs, hub):
    run = adapter_run(runs)
    with pytest.raises(HubError, match="token with write permission.*HF_TOKEN"):
        push_run(run, "alice/x")
    with pytest.raises(HubError, match="paste it in the token field"):
        push_run(run, "alice/x", token="  ", use_env_token=False)
    with pytest.raises(HubError, match="spaces or invisible") as err:
        push_run(run, "alice/x", token=TOKEN[:10] + " " + TOKEN[10:])
    assert TOKEN[10:] not in str(err.value)
    with pytest.raises(ConfigError, match="what"):
        push_run(run, "alice/x", what="weights", token=TOKEN)
    assert hub.calls == []


def test_offline_mode_is_a_clear_message_without_any_connection(runs, hub, monkeypatch):
    run = adapter_run(runs)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="Offline mode is on"):
        push_run(run, "alice/x", token=TOKEN)
    assert hub.tokens == [] and hub.calls == []


def _http_error(status: int) -> HfHubHTTPError:
    request = httpx2.Request("POST", "https://huggingface.co/api/repos/create", headers={"authorization": f"Bearer {TOKEN}"})
    return HfHubHTTPError(f"{status} Client Error for token {TOKEN}", response=httpx2.Response(status, request=request))


@pytest.mark.parametrize("exc,fragment", [
    (_http_error(401), "token was refused"),
    (_http_error(403), "lacks write permission for 'alice'"),
    (_http_error(500), r"HTTP 500\): 500 Client Error for token \*\*\*"),
    (httpx2.ConnectError(f"cannot connect with {TOKEN}"), "Could not reach the Hugging Face Hub"),
])
def test_hub_failures_become_clear_messages_without_the_token(runs, tmp_path, monkeypatch, caplog, exc, fragment):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    fake = FakeHub(tmp_path / "hub", fail=exc)
    monkeypatch.setattr(hub_push, "_hf_api", fake)
    run = adapter_run(runs)
    with pytest.raises(HubError, match=fragment) as err:
        push_run(run, "alice/x", token=TOKEN)
    assert TOKEN not in str(err.value) and err.value.__cause__ is None and err.value.__suppress_context__
    assert TOKEN not in caplog.text
    assert not any(e["type"] == "push" for e in read_events(run))


def test_real_hfapi_offline_is_mapped(runs, monkeypatch):
    """Without the fake: huggingface_hub's own offline refusal (it raises before connecting) is mapped too."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # our own pre-check is passed, the library's is not
    with pytest.raises(HubError, match="Offline mode is on"):
        push_run(adapter_run(runs), "alice/x", token=TOKEN)


# --------------------------------------------------------------------------------------------------
# CLI and app
# --------------------------------------------------------------------------------------------------


def test_cli_push(runs, hub, monkeypatch, capsys):
    from engine.cli import main

    adapter_run(runs)
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs))
    assert main(["push", "--run", "r1", "--repo", "alice/nope/x"]) == 2
    assert "repo_id" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["push", "--run", "r1", "--repo", "alice/x"]) == 2  # no HF_TOKEN, no terminal to ask in
    assert "HF_TOKEN" in capsys.readouterr().err and hub.calls == []
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert main(["push", "--run", "r1", "--repo", "alice/x", "--public", "--what", "adapter"]) == 0
    out = capsys.readouterr()
    assert "pushed to https://huggingface.co/alice/x" in out.out and TOKEN not in out.out + out.err
    assert hub.calls[0][1]["private"] is False
    assert main(["push", "--run", "r1", "--repo", "alice/x", "--what", "merged"]) == 2
    assert "python -m engine merge r1" in capsys.readouterr().err


def test_cli_asks_for_the_token_when_interactive(runs, hub, monkeypatch):
    from engine.cli import main

    adapter_run(runs)
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs))
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("getpass.getpass", lambda prompt="": TOKEN)
    assert main(["push", "--run", "r1", "--repo", "alice/x"]) == 0 and hub.tokens == [TOKEN]


def test_app_push_to_hub(runs, hub, caplog, monkeypatch):
    gr = pytest.importorskip("gradio")
    from gradio_client import Client

    import app

    caplog.set_level(logging.DEBUG)
    adapter_run(runs)
    demo = app.build_app(runs)
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        client = Client(demo.local_url, verbose=False)
        result, token_box = client.predict("r1", "alice/dates", "adapter", True, TOKEN, api_name="/push_to_hub")
        assert "[https://huggingface.co/alice/dates](https://huggingface.co/alice/dates)" in result
        assert token_box == "" and TOKEN not in result
        assert hub.tokens == [TOKEN] and "README.md" in hub.files()
        with pytest.raises(Exception, match="owner/name"):
            client.predict("r1", "no-owner", "adapter", True, TOKEN, api_name="/push_to_hub")
        monkeypatch.setenv("HF_TOKEN", "hf_ServerOwnersToken000000000")
        with pytest.raises(Exception, match="paste it in the token field"):  # the server's HF_TOKEN is never used
            client.predict("r1", "alice/dates", "adapter", True, "", api_name="/push_to_hub")
    finally:
        demo.close()
    assert gr is not None and TOKEN not in caplog.text
    assert_nowhere(TOKEN, runs)


def test_the_real_client_reads_the_staged_folder_and_card(runs, hub, monkeypatch):
    """huggingface_hub's own folder scan (offline part of upload_folder) follows the staged symlinks, and its
    model-card parser reads our front matter."""
    from huggingface_hub import HfApi, ModelCard

    seen = {}

    def upload_folder(*, repo_id, folder_path, **kw):
        # README.md left out only because the real scan validates it over the network.
        ops = HfApi()._prepare_upload_folder_additions(folder_path, "", ignore_patterns=["README.md"])
        seen.update({op.path_in_repo: op.upload_info.size for op in ops})
        seen["README.md"] = (Path(folder_path) / "README.md").read_text(encoding="utf-8")

    monkeypatch.setattr(hub, "upload_folder", upload_folder)
    run = adapter_run(runs, "r-real", method="lora", base_model="Qwen/Qwen2.5-0.5B")
    push_run(run, "alice/real", token=TOKEN)
    weights = run / "adapter" / "adapter_model.safetensors"
    assert seen["adapter_model.safetensors"] == weights.stat().st_size > 0
    card = ModelCard(seen["README.md"])
    assert card.data.library_name == "peft" and card.data.base_model == "Qwen/Qwen2.5-0.5B" and "compact-llm-lab" in card.data.tags


# -- the card's eval_results and the GGUF option of a push (issue: take the model home) ---------------


def test_card_eval_results_parse_back_with_huggingface_hub(runs):
    from huggingface_hub import ModelCard

    run = adapter_run(runs)
    card = ModelCard(model_card(run, "adapter", "alice/dates-qlora", license="apache-2.0"))
    data = card.data
    assert data.library_name == "peft" and data.license == "apache-2.0" and "compact-llm-lab" in data.tags
    results = {r.metric_type: r for r in data.eval_results}
    assert results["loss"].metric_value == 1.25 and results["perplexity"].metric_value == pytest.approx(3.49, abs=0.01)
    assert results["accuracy"].metric_value == 0.85 and results["accuracy"].task_name == "Date to ISO conversion"
    assert results["loss"].dataset_type == "compact-llm-lab/dates" and data.model_name == "dates-qlora"
    assert "## Other formats" in card.content and "model.onnx.data" in card.content


def test_push_model_with_gguf_uploads_the_file_modelfile_and_ollama_usage(runs, hub, tiny_dir):
    run = runs / "full-g"
    shutil.copytree(tiny_dir, run / "model")
    finish_run(run, TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=2, run_name="full-g"))
    push_run(run, "alice/dates-full", what="model", token=TOKEN, gguf="q8_0")
    files = hub.files()
    assert {"full-g-q8_0.gguf", "Modelfile", "README.md", "model.safetensors"} <= files
    readme = (hub.uploads[-1] / "README.md").read_text()
    assert "ollama run hf.co/alice/dates-full:Q8_0" in readme and "gguf" in front_matter(readme)["tags"]
    assert "FROM ./full-g-q8_0.gguf" in (hub.uploads[-1] / "Modelfile").read_text()
    with pytest.raises(ConfigError, match="gguf"):
        push_run(adapter_run(runs), "alice/x", what="adapter", token=TOKEN, gguf="q8_0")
    with pytest.raises(ConfigError, match="type"):
        push_run(run, "alice/x", what="model", token=TOKEN, gguf="q3")


def test_a_gguf_pushed_from_the_page_decodes_as_the_playground_does_for_the_run(runs, hub, tiny_dir):
    """The page's push with a GGUF writes the Modelfile with the run's own Playground preset, as its Export button does:
    greedy (`precise`: temperature 0) for a run on the date task, not the sampling default of GgufSettings."""
    from engine.training.jobs import JobManager
    from engine.views import run_control

    run = runs / "full-p"
    shutil.copytree(tiny_dir, run / "model")
    finish_run(run, TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=2, run_name="full-p"))
    run_control.push_finished_run(JobManager(runs), "full-p", "alice/dates-p", "model", True, TOKEN, gguf="q8_0")
    modelfile = (hub.uploads[-1] / "Modelfile").read_text()
    assert "PARAMETER temperature 0\n" in modelfile and "top_p" not in modelfile, modelfile
    push_run(run, "alice/dates-p", what="model", token=TOKEN, gguf="q8_0")  # the library's default stays GgufSettings'
    assert "PARAMETER temperature 0.7" in (hub.uploads[-1] / "Modelfile").read_text()
