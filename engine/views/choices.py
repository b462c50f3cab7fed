"""The choice lists of the page's dropdowns: models to fine-tune from, models and adapters for the playground, model
placements, and the built-in datasets offered for training and evaluation."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..training.jobs import JobManager

NO_ADAPTER = "(none)"
PLACEMENTS = {"one device": None, "auto (offload to CPU/disk)": "auto"}  # label -> device_map for engine.models.loading.load_model
# The built-in datasets in the order the Evaluate tab and the Fine-tune form list them, each with the language key of
# its human name (engine/data/files.py describes their contents).
BUILTIN_DATASETS = {
    "builtin:dates": "finetune.dataset.dates",
    "builtin:instructions": "finetune.dataset.instructions",
    "builtin:corpus": "finetune.dataset.corpus",
    "builtin:preferences": "finetune.dataset.preferences",
    "builtin:feedback": "finetune.dataset.feedback",
}


def train_model_choices(jobs: JobManager, runs: bool = True) -> list[str]:
    """Suggestions for the base and teacher models: every built-in preset (pretrained on first use), finished runs (to
    continue from) and their merged models, then the catalog's Hub ids. runs=False: without the runs (what the page is
    built with: the runs are listed for each session when it loads the page, never baked into its configuration)."""
    from ..estimator.catalog import compact_presets  # the presets as data: listing them never imports the model code

    known = playground_models(jobs, runs)
    return [f"builtin:{p}" for p in compact_presets()] + [m for m in known if not m.startswith("builtin:")]


def playground_models(jobs: JobManager, runs: bool = True) -> list[str]:
    """Built-in models, finished runs, their merged models, then the catalog's Hub ids (downloaded when online).
    runs=False: without the runs (see `train_model_choices`)."""
    from ..estimator.catalog import catalog, compact_presets
    from ..models.references import builtin_weights_dir, shipped_examples

    out = [f"builtin:{p}" for p in compact_presets() if builtin_weights_dir(p, jobs.runs_dir) is not None]  # shipped or pretrained
    out += [f"builtin:{name}" for name in shipped_examples() if f"builtin:{name}" not in out]  # fine-tuned examples (before/after)
    for s in jobs.finished_runs() if runs else []:
        out.append(f"run:{s.name}")
        if (jobs.runs_dir / s.name / "merged" / "config.json").exists():
            out.append(f"run:{s.name}/merged")
    return out + [m.hf_id for m in catalog() if m.hf_id]


def playground_lists(jobs: JobManager) -> tuple[list[str], list[str], list[str]]:
    """The choices of the playground's Model, Model B and Adapter dropdowns."""
    models = playground_models(jobs)
    return models, models, adapter_choices(jobs)


def adapter_choices(jobs: JobManager, runs: bool = True) -> list[str]:
    """NO_ADAPTER, then every finished run that saved a LoRA adapter (runs=False: NO_ADAPTER only, see
    `train_model_choices`)."""
    return [NO_ADAPTER] + [f"run:{s.name}" for s in (jobs.finished_runs() if runs else []) if (jobs.runs_dir / s.name / "adapter" / "adapter_config.json").exists()]


# Training only (made when the run starts from its base model's answers, engine/training/mistake_data.py): not a file
# the Evaluate tab could score
TRAINING_ONLY_DATASETS = {"builtin:date-mistakes": "pref_run.dataset.mistakes"}


def dataset_choices() -> list[tuple[str, str]]:
    """(language key of the human name, reference) for each built-in dataset, for the Fine-tune form's dataset dropdown
    (which still accepts a typed hub:owner/name)."""
    return [(key, ref) for ref, key in {**BUILTIN_DATASETS, **TRAINING_ONLY_DATASETS}.items()]
