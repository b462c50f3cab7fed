"""Ten people at once through the app's API: every request completes, queued by the concurrency limit, with
its own answer (no mix-ups); Stop from one session never stops another session's generation."""

from __future__ import annotations

import time

import pytest
from conftest import running_app

pytest.importorskip("gradio")
from gradio_client import Client  # noqa: E402

from engine.config import GenerationSettings  # noqa: E402
from engine.fields import field_specs  # noqa: E402

GEN = [s.name for s in field_specs(GenerationSettings)]


def _gen(**over):
    values = {s.name: s.default for s in field_specs(GenerationSettings)}
    values.update(over)
    return [values[n] for n in GEN]


@pytest.fixture(scope="module")
def url(runs_dir):
    with running_app(runs_dir) as demo:
        yield demo.local_url


def test_ten_simultaneous_requests_complete_without_mixups(url, runs_dir):
    from engine.config import GenerationSettings as GS
    from engine.inference.generate import generate_text
    from engine.models.loading import load_model

    prompts = [f"Converta a data {d:02d}/0{1 + d % 9}/20{10 + d} para o formato ISO (AAAA-MM-DD)." for d in range(1, 11)]
    loaded = load_model("builtin:compact-mini", runs_dir=runs_dir)
    expected = [generate_text(loaded, p, GS(max_new_tokens=12, do_sample=False)) for p in prompts]
    clients = [Client(url, verbose=False) for _ in prompts]
    jobs = [c.submit("builtin:compact-mini", "none", "chat", "", p, [], *_gen(max_new_tokens=12, do_sample=False), api_name="/generate")
            for c, p in zip(clients, prompts, strict=True)]
    for job, prompt, want in zip(jobs, prompts, expected, strict=True):
        chat, _prompt, stats, _info = job.result(timeout=300)
        assert chat[-2]["content"] in (prompt, [{"type": "text", "text": prompt}]) or prompt in str(chat[-2]["content"])
        assert chat[-1]["content"] == want or want in str(chat[-1]["content"])
        assert "tokens/s" in stats


def test_stop_is_per_session(url):
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    long = _gen(max_new_tokens=200, do_sample=True, temperature=1.0, seed=7, repetition_penalty=1.0)
    job = a.submit("builtin:compact-mini", "none", "completion", "", "A memória da GPU", [], *long, api_name="/generate")
    time.sleep(1.0)
    b.predict(api_name="/stop_generation")  # another person's Stop
    _chat, _p, stats, _i = job.result(timeout=300)
    assert "ended: stopped" not in stats
    job = a.submit("builtin:compact-mini", "none", "completion", "", "A memória da GPU", [], *long, api_name="/generate")
    deadline = time.time() + 60
    while time.time() < deadline and not any("tokens" in str(o[2]) for o in job.outputs() if len(o) > 2):
        time.sleep(0.05)
    a.predict(api_name="/stop_generation")  # my own Stop ends it at once
    _chat, _p, stats, _i = job.result(timeout=300)
    assert "ended: stopped" in stats or "ended: the model finished its answer" in stats
