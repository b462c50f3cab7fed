"""The run buttons without gradio: a message when no run is picked, the owner check before acting, and the text shown."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.errors import EngineError, JobError
from engine.views.run_control import (
    delete_run,
    merge_finished_run,
    push_default,
    push_finished_run,
    resume_run,
    retry_run,
    stop_run,
    zip_for_download,
)


class FakeJobs:
    def __init__(self, allowed: bool = True) -> None:
        self.runs_dir, self.allowed, self.calls = Path("/runs"), allowed, []

    def check_control(self, name, owner, action):
        self.calls.append(("check", name, owner, action))
        if not self.allowed:
            raise JobError(f"Only the browser that started '{name}' can {action} it.")

    def stop(self, name, wait=True):
        self.calls.append(("stop", name, wait))
        return SimpleNamespace(state="stopped")

    def resume(self, name):
        self.calls.append(("resume", name))

    def retry_smaller_batch(self, name, owner=None):
        return f"{name}-retry"

    def delete(self, name):
        self.calls.append(("delete", name))

    def status(self, name):
        return SimpleNamespace(state="running", resumable=self.checkpoint)

    checkpoint = True  # the run has a complete checkpoint (resume_run says "resuming" rather than "starting again")


@pytest.mark.parametrize(("action", "message"), [(stop_run, "No run selected."), (resume_run, "Pick a run to resume."),
                                                 (retry_run, "Pick the run that ran out of memory."), (delete_run, "Pick a run to delete.")])
def test_no_run_picked_is_a_message(action, message):
    with pytest.raises(EngineError, match=message):
        action(FakeJobs(), None, "key")


def test_actions_check_the_owner_first_and_say_what_happened():
    jobs = FakeJobs()
    assert stop_run(jobs, "r", "key").startswith("Asked 'r' to stop")
    assert jobs.calls[:2] == [("check", "r", "key", "stop"), ("stop", "r", False)]  # then a background stop_or_kill
    assert resume_run(jobs, "r", "key") == "Resuming 'r' from its last complete checkpoint."
    jobs.checkpoint = False  # failed while loading: no checkpoint, Resume starts it again and says so
    assert resume_run(jobs, "r", "key") == "Starting 'r' again from the beginning (it had saved no checkpoint)."
    assert resume_run(jobs, "r", "key", "pt-BR").startswith("Começando 'r' de novo do início")
    jobs.checkpoint = True
    new, text = retry_run(jobs, "r", "key")
    assert new == "r-retry" and text.startswith("Started 'r-retry' with half the micro batch")
    delete_run(jobs, "r", "key")
    assert jobs.calls[-1] == ("delete", "r")
    refused = FakeJobs(allowed=False)
    with pytest.raises(JobError, match="Only the browser"):
        stop_run(refused, "r", "other")
    assert refused.calls == [("check", "r", "other", "stop")]
    time.sleep(0.1)  # the background stop_or_kill of the first stop
    assert [c for c in jobs.calls if c[0] == "stop"][-1] == ("stop", "r", True)


def test_download_and_merge_need_a_run_and_merge_a_finished_one():
    with pytest.raises(EngineError, match="Pick a run to download."):
        zip_for_download(FakeJobs(), "")
    with pytest.raises(EngineError, match="Pick a finished LoRA/QLoRA run to merge."):
        merge_finished_run(FakeJobs(), None)
    with pytest.raises(EngineError, match="Run 'r' has not finished; merge needs its final adapter."):
        merge_finished_run(FakeJobs(), "r")


def test_push_needs_a_run_and_says_where_it_went(monkeypatch):
    import engine.export.hub as hub

    calls = []
    monkeypatch.setattr(hub, "push_run", lambda path, repo, **kw: calls.append((path, repo, kw)) or f"https://hf.co/{repo}")
    with pytest.raises(JobError, match="Pick a finished run to push."):
        push_finished_run(FakeJobs(), None, "me/m", "adapter", True, "hf_x")
    assert calls == []
    text = push_finished_run(FakeJobs(), "r", "me/m", "merged", 1, "hf_x")
    assert text == "✔ Pushed the merged of **r** with a model card to [https://hf.co/me/m](https://hf.co/me/m)"
    assert calls == [(Path("/runs/r"), "me/m", {"what": "merged", "token": "hf_x", "private": True, "use_env_token": False, "runs_dir": Path("/runs"),
                                                 "gguf": None, "gguf_preset": None})]
    text = push_finished_run(FakeJobs(), "r", "me/m", "model", 1, "hf_x", "q8_0")
    assert text.startswith("✔ Pushed the model of **r** and a q8_0 GGUF") and calls[-1][2]["gguf"] == "q8_0"


def test_push_default_is_model_for_a_full_run_adapter_otherwise_none_when_unreadable():
    jobs = FakeJobs()
    outputs = {"full": "model", "lora": "adapter"}

    def status(name):
        if name not in outputs:
            raise JobError(f"There is no run {name!r}.")
        return SimpleNamespace(output=outputs[name])

    jobs.status = status
    assert push_default(jobs, "full") == "model" and push_default(jobs, "lora") == "adapter"
    assert push_default(jobs, None) == "adapter" and push_default(jobs, "gone") is None


def test_messages_in_portuguese():
    jobs = FakeJobs()
    assert stop_run(jobs, "r", "key", "pt-BR").startswith("Pedimos para 'r' parar")
    assert resume_run(jobs, "r", "key", "pt-BR") == "Retomando 'r' do último checkpoint completo."
    with pytest.raises(EngineError) as exc:
        resume_run(jobs, None, "key", "pt-BR")
    assert exc.value.render("pt-BR") == "Escolha um treino para retomar." and str(exc.value) == "Pick a run to resume."
    time.sleep(0.1)  # the background stop_or_kill
