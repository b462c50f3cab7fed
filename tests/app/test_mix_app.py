"""Adapters mixed from the page (gradio_client against the launched app): the runs offered, Mix, then the mixed run tried in
the Playground, evaluated, shown beside its parents, merged and exported to GGUF like any other run; a refused mix names
its field."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import gen_api_values, make_lora_parent, running_app

from engine.training.jobs import JobManager

PROMPT = "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD)."


def _wait(jobs: JobManager, name: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and (jobs.status(name).state in ("running", "created") or jobs.active_merge()):
        time.sleep(0.5)


def test_mix_from_the_page_then_try_evaluate_compare_and_export(runs_dir, tmp_path):
    from gradio_client import Client

    runs = tmp_path / "runs"
    (runs / "_builtin").mkdir(parents=True)
    (runs / "_builtin" / "compact-mini").symlink_to(runs_dir / "_builtin" / "compact-mini")
    make_lora_parent(runs, "page-dates", seed=1)
    make_lora_parent(runs, "page-instr", seed=2)
    jobs = JobManager(runs)
    with running_app(runs) as demo:
        client = Client(demo.local_url, verbose=False)
        assert sorted(client.predict(api_name="/mix_runs")) == ["page-dates", "page-instr"]
        with pytest.raises(Exception, match=r"Runs to mix \(parents\)"):
            client.predict(["page-dates"], "ties", 1, 1, 1, 1, 0.5, 0, False, "page-one", api_name="/mix_adapters")
        client.predict(["page-dates", "page-instr"], "dare_linear", 1, 0.5, 1, 1, 0.6, 0, False, "page-mix", api_name="/mix_adapters")
        _wait(jobs, "page-mix")
        s = jobs.status("page-mix")
        assert s.state == "finished", (runs / "page-mix" / "train.log").read_text()[-2000:]
        # tried in the Playground like any run
        chat, _prompt, _stats, info = client.predict("run:page-mix", "none", "chat", "", PROMPT, [], *gen_api_values(max_new_tokens=4),
                                                     api_name="/generate")
        assert chat[-1]["role"] == "assistant" and "page-mix" in info
        # evaluated: perplexity in the Playground, and the parents' and the mix's scores side by side
        out = client.predict("run:page-mix", "run:page-dates", "none", True, "A memória da GPU é limitada. " * 10, "builtin:corpus", 32, 16,
                             api_name="/perplexity")
        rows = out["data"] if isinstance(out, dict) else out
        assert rows[0][1] == "perplexity" and rows[0][2] > 1
        note, table = client.predict("page-mix", api_name="/mix_scores")
        assert "page-dates + page-instr" in note and "dare_linear" in note and "density 0.6" in note
        cells = table["data"] if isinstance(table, dict) and "data" in table else table["value"]["data"]
        assert [r[0] for r in cells] == ["base", "page-dates", "page-instr", "page-mix"]
        assert cells[1][1] == "parent (weight 1)" and cells[2][1] == "parent (weight 0.5)" and cells[1][2] == "85 %"
        # exported: merged into the base (a job), then GGUF
        client.predict("page-mix", api_name="/merge_adapter")
        _wait(jobs, "page-mix")
        assert (runs / "page-mix" / "merged" / "model.safetensors").exists(), (runs / "page-mix" / "merge.log").read_text()[-2000:]
        archive, message = client.predict("page-mix", "q8_0", api_name="/export_gguf")
        assert str(archive if not isinstance(archive, dict) else archive["value"]).endswith(".zip") and "GGUF" in message
    assert Path(runs / "page-mix" / "mix.yaml").exists()
