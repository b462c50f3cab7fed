"""Dropdown choices without gradio: built-in models only once pretrained, finished runs and their merged models,
adapters from runs that saved one, then the catalog's Hub ids."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from engine.models.compact import compact_presets
from engine.models.references import builtin_model_dir
from engine.views.choices import BUILTIN_DATASETS, NO_ADAPTER, PLACEMENTS, adapter_choices, playground_lists, playground_models, train_model_choices


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


def _jobs(runs: Path, *finished: str) -> SimpleNamespace:
    return SimpleNamespace(runs_dir=runs, finished_runs=lambda: [SimpleNamespace(name=n) for n in finished])


def test_playground_lists_pretrained_builtins_runs_merged_models_then_the_catalog(tmp_path):
    _touch(builtin_model_dir("compact-mini", tmp_path) / "config.json")
    _touch(tmp_path / "full-run" / "merged" / "config.json")
    models = playground_models(_jobs(tmp_path, "lora-run", "full-run"))
    # the built-in model, the fine-tuned example shipped beside it (before/after at once), the runs, then the catalog
    assert models[:5] == ["builtin:compact-mini", "builtin:compact-mini-dates", "run:lora-run", "run:full-run", "run:full-run/merged"]
    assert len(models) > 5 and all("/" in m or not m.startswith(("run:", "builtin:")) for m in models[5:])


def test_training_suggests_every_builtin_preset_even_before_pretraining(tmp_path):
    choices = train_model_choices(_jobs(tmp_path, "a"))
    builtins = [f"builtin:{p}" for p in compact_presets()]
    assert choices[: len(builtins)] == builtins and choices[len(builtins)] == "run:a"


def test_adapters_come_from_finished_runs_that_saved_one(tmp_path):
    _touch(tmp_path / "lora-a" / "adapter" / "adapter_config.json")
    assert adapter_choices(_jobs(tmp_path, "lora-a", "full-b")) == [NO_ADAPTER, "run:lora-a"]
    assert adapter_choices(_jobs(tmp_path)) == [NO_ADAPTER]


def test_placements_and_builtin_datasets():
    assert PLACEMENTS == {"one device": None, "auto (offload to CPU/disk)": "auto"}
    assert list(BUILTIN_DATASETS) == ["builtin:dates", "builtin:instructions", "builtin:corpus", "builtin:preferences",
                                     "builtin:feedback"]  # the Evaluate tab's order


def test_playground_lists_are_the_models_twice_then_the_adapters(tmp_path):
    jobs = _jobs(tmp_path, "lora-run")
    models, models_b, adapters = playground_lists(jobs)
    assert models == models_b == playground_models(jobs) and adapters == adapter_choices(jobs)


def test_the_fine_tune_form_offers_the_builtin_datasets_by_human_name():
    from engine import i18n
    from engine.views.choices import dataset_choices

    refs = [ref for _, ref in dataset_choices()]
    assert refs == [*BUILTIN_DATASETS, "builtin:date-mistakes"]  # the pairs of the base model's own mistakes: training only
    for key, _ in dataset_choices():
        assert i18n.t(key) != key and i18n.t(key, "pt-BR") != i18n.t(key)  # a name in each language, never the key
