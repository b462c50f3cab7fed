"""Playground loading through the app's API: a run's adapter on top of a chosen base (no merge), a run's merged
model as a base, accelerate's "auto" placement, and the local-folder policy (CPU, offline).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import CPU, make_adapter_run, running_app, tiny_model_dir

gr = pytest.importorskip("gradio")
from gradio_client import Client  # noqa: E402

import app  # noqa: E402
from engine.config import GenerationSettings  # noqa: E402
from engine.errors import ConfigError  # noqa: E402
from engine.estimator.handoff import check_ui_model_ref  # noqa: E402
from engine.export.merge import merge_adapter  # noqa: E402
from engine.fields import field_specs  # noqa: E402
from engine.models.cache import MODEL_CACHE  # noqa: E402
from engine.models.references import builtin_model_dir  # noqa: E402
from engine.runs import EventLog  # noqa: E402
from engine.training.jobs import JobManager  # noqa: E402
from engine.views.choices import NO_ADAPTER, adapter_choices, playground_models  # noqa: E402

GEN = [s.default for s in field_specs(GenerationSettings)]
GEN_NAMES = [s.name for s in field_specs(GenerationSettings)]
GREEDY = [{"max_new_tokens": 6, "do_sample": False}.get(n, d) for n, d in zip(GEN_NAMES, GEN, strict=True)]
PROMPT = "what color is the sky"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("pg-runs")
    shutil.copytree(tiny_model_dir(), builtin_model_dir("compact-mini", runs))
    make_adapter_run(runs, name="lora-a", method="lora")
    EventLog(runs / "lora-a" / "events.jsonl").write("done", output="adapter", path=str(runs / "lora-a" / "adapter"), steps=1)  # a finished run
    merge_adapter(runs / "lora-a", device=CPU)
    return runs


@pytest.fixture(scope="module")
def client(runs):
    # fp32 compute: "merging does not change what the model says" is exact in fp32; in bf16 (auto on a CPU fast at it)
    # an adapter applied on the fly and one folded into the weights round differently
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("COMPACT_LAB_CPU_BF16", "0")
            with running_app(runs) as demo:
                yield Client(demo.local_url, verbose=False)
    finally:
        MODEL_CACHE.unload_all()


def _answer(client, model: str, *extra) -> tuple[str, str]:
    chat, _prompt, _stats, info = client.predict(model, "none", "completion", "", PROMPT, [], *GREEDY, *extra, api_name="/generate")
    return chat[-1]["content"], info


def test_model_lists_offer_merged_models_and_run_adapters(runs):
    jobs = JobManager(runs)
    models = playground_models(jobs)
    assert "run:lora-a" in models and "run:lora-a/merged" in models
    assert any("/" in m and not m.startswith(("run:", "builtin:")) for m in models)  # the catalog's Hub ids
    assert adapter_choices(jobs) == [NO_ADAPTER, "run:lora-a"]


def test_adapter_on_a_base_equals_the_run_and_its_merged_model(client):
    plain, _ = _answer(client, "builtin:compact-mini")
    with_adapter, info = _answer(client, "builtin:compact-mini", "run:lora-a", "one device", 0)
    as_run, _ = _answer(client, "run:lora-a")
    merged, merged_info = _answer(client, "run:lora-a/merged")
    assert with_adapter == as_run  # the same adapter on the same base, picked two ways
    assert merged == as_run  # merging does not change what the model says (greedy)
    assert with_adapter != plain  # the adapter's weights are not zero: it changes the answer
    assert "adapter" in info.lower() and "merged" in merged_info


def test_auto_placement_loads_and_says_where_things_live(client):
    text, info = _answer(client, "builtin:compact-mini", NO_ADAPTER, "auto (offload to CPU/disk)", 4)
    assert text and "cpu" in info.lower()


def test_missing_merged_model_and_bad_adapter_are_messages(client, runs):
    make_adapter_run(runs, name="lora-b", method="lora")
    with pytest.raises(Exception, match="merge its adapter first"):
        _answer(client, "run:lora-b/merged")
    with pytest.raises(Exception, match="server paths"):
        _answer(client, "builtin:compact-mini", "/etc/passwd", "one device", 0)


def test_local_folders_only_when_the_app_allows_them(runs, tmp_path):
    folder = builtin_model_dir("compact-mini", runs)
    with pytest.raises(ConfigError, match="server paths"):
        check_ui_model_ref(str(folder), runs)
    assert check_ui_model_ref(str(folder), runs, allow_local=True) == str(folder.resolve())
    with pytest.raises(ConfigError, match="config.json"):
        check_ui_model_ref(str(tmp_path), runs, allow_local=True)
    with pytest.raises(SystemExit):
        app.main(["--share", "--allow-local-models"])
