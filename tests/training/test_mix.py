"""Adapters mixed (engine/training/mix.py): every method makes an adapter the playground loads and generates with, whose
weights are what the method says (linear 1,0 is the first parent, cat and full-rank SVD the sum); every refusal names its
field in both languages; QLoRA with LoRA is mixed on the 16-bit base with a warning."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import make_lora_parent as make_parent

from engine.errors import ConfigError
from engine.mix_config import MixConfig
from engine.runs import load_config, summarize
from engine.training.mix import mix_scores, plan_mix, read_mix, run_mix, write_mix_run

BASE = "builtin:compact-mini"


def deltas(adapter_dir: Path) -> dict[str, torch.Tensor]:
    """Each targeted layer's weight change B @ A * alpha / r, read from a saved adapter."""
    from safetensors.torch import load_file

    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    acfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    scale = acfg["lora_alpha"] / acfg["r"]
    out = {}
    for key, a in weights.items():
        if key.endswith("lora_A.weight"):
            b = weights[key.replace("lora_A", "lora_B")]
            out[key.replace(".lora_A.weight", "")] = (b.float() @ a.float()) * scale
    return out


@pytest.fixture(scope="module")
def runs(runs_dir, tmp_path_factory) -> Path:
    """A runs folder of its own (the session's built-in model linked in) with two parents of rank 4 and one of rank 8."""
    runs = tmp_path_factory.mktemp("mix-runs")
    (runs / "_builtin").mkdir()
    (runs / "_builtin" / "compact-mini").symlink_to(runs_dir / "_builtin" / "compact-mini")
    make_parent(runs, "dates-a", seed=1)
    make_parent(runs, "instr-b", seed=2)
    make_parent(runs, "wide-c", r=8, seed=3)
    return runs


def mix(runs: Path, name: str, **fields) -> Path:
    cfg = MixConfig(score=False, run_name=name, **fields)
    run_dir = runs / name
    shutil.rmtree(run_dir, ignore_errors=True)
    write_mix_run(plan_mix(cfg, runs), run_dir)
    done = run_mix(run_dir, runs)
    assert done["type"] == "done" and done["output"] == "adapter"
    return run_dir


@pytest.mark.parametrize("combination", ["linear", "ties", "dare_linear", "dare_ties", "svd", "cat"])
def test_each_method_makes_a_run_the_playground_loads_and_generates_with(runs, combination):
    from engine.models.loading import load_model

    run_dir = mix(runs, f"mix-{combination}", parents="dates-a,instr-b", combination=combination)
    s = summarize(run_dir, alive=False)
    assert s.state == "finished" and s.output == "adapter" and not s.restartable and "dates-a + instr-b" in s.dataset
    assert load_config(run_dir / "config.yaml").lora.r == (8 if combination == "cat" else 4)
    assert read_mix(run_dir).combination == combination
    loaded = load_model(f"run:{run_dir.name}", runs_dir=runs)
    enc = loaded.tokenizer("Converta a data 05/09/2023", return_tensors="pt")
    out = loaded.model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == enc["input_ids"].shape[1] + 3
    mixed, a = deltas(run_dir / "adapter"), deltas(runs / "dates-a" / "adapter")
    assert mixed.keys() == a.keys()
    assert all(torch.count_nonzero(d) > 0 for d in mixed.values())
    assert any(not torch.allclose(mixed[k], a[k], atol=1e-5) for k in a)  # a mix, not a copy of the first parent


def test_linear_with_weights_1_0_is_the_first_parent(runs):
    run_dir = mix(runs, "mix-linear-10", parents="dates-a,instr-b", combination="linear", weights="1,0")
    mixed, a = deltas(run_dir / "adapter"), deltas(runs / "dates-a" / "adapter")
    for key in a:
        torch.testing.assert_close(mixed[key], a[key], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("combination", "extra"), [("cat", {}), ("svd", {"svd_rank": 8})])
def test_cat_and_full_rank_svd_are_the_weighted_sum_of_the_changes(runs, combination, extra):
    run_dir = mix(runs, f"mix-sum-{combination}", parents="dates-a,instr-b", combination=combination, weights="1,0.5", **extra)
    mixed, a, b = deltas(run_dir / "adapter"), deltas(runs / "dates-a" / "adapter"), deltas(runs / "instr-b" / "adapter")
    for key in a:
        torch.testing.assert_close(mixed[key], a[key] + 0.5 * b[key], atol=2e-4, rtol=1e-3)


def test_dare_linear_at_density_1_is_linear(runs):
    lin = deltas(mix(runs, "mix-lin", parents="dates-a,instr-b", combination="linear") / "adapter")
    dare = deltas(mix(runs, "mix-dare1", parents="dates-a,instr-b", combination="dare_linear", density=1.0) / "adapter")
    for key in lin:
        torch.testing.assert_close(dare[key], lin[key], atol=1e-5, rtol=1e-4)


def test_svd_and_cat_mix_runs_of_different_ranks(runs):
    assert load_config(mix(runs, "mix-svd-ranks", parents="dates-a,wide-c", combination="svd") / "config.yaml").lora.r == 8
    assert load_config(mix(runs, "mix-cat-ranks", parents="dates-a,wide-c", combination="cat") / "config.yaml").lora.r == 12


def test_the_mix_job_scores_the_base_each_parent_and_the_mix(runs, monkeypatch):
    from engine.inference import tasks

    monkeypatch.setattr(tasks, "TEST_SIZE", 4)  # four dates: the scoring path, not the accuracy, is under test here
    cfg = MixConfig(parents="dates-a,instr-b", combination="ties", run_name="mix-scored")
    write_mix_run(plan_mix(cfg, runs), runs / "mix-scored")
    run_mix(runs / "mix-scored", runs)
    assert set(mix_scores(runs / "mix-scored")) == {"base", "dates-a", "instr-b", "mix-scored"}
    assert summarize(runs / "mix-scored", alive=False).task_scores.keys() == {"before", "after"}


# ---- refusals: each names its field, in English and in Portuguese ----

def _refused(fn, field: str, en: str, pt: str) -> None:
    with pytest.raises(ConfigError) as info:
        fn()
    assert info.value.field == field
    assert en in info.value.render("en"), info.value.render("en")
    assert pt in info.value.render("pt-BR"), info.value.render("pt-BR")


@pytest.mark.parametrize(("fields", "field", "en", "pt"), [
    ({"parents": "dates-a"}, "parents", "two or more different run names", "dois ou mais nomes"),
    ({"parents": "dates-a,dates-a"}, "parents", "two or more different run names", "dois ou mais nomes"),
    ({"parents": "dates-a,instr-b", "weights": "1"}, "weights", "for each of the 2 runs", "para cada um dos 2 treinos"),
    ({"parents": "dates-a,instr-b", "weights": "1,lots"}, "weights", "one number from -10 to 10", "um número de -10 a 10"),
    ({"parents": "dates-a,instr-b", "weights": "0,0"}, "weights", "not all 0", "nem todos 0"),
    ({"parents": "dates-a,instr-b", "density": 0.0}, "density", "0.01", "0,01"),
    ({"parents": "dates-a,instr-b", "density": 1.5}, "density", "1", "1"),
    ({"parents": "dates-a,instr-b", "combination": "magic"}, "combination", "ties", "ties"),
])
def test_mix_config_refusals_name_the_field(fields, field, en, pt):
    _refused(lambda: MixConfig(**fields), field, en, pt)
    with pytest.raises(ConfigError) as info:
        MixConfig(**fields)
    assert "Mix" in info.value.render("en") or field in info.value.render("en")


def test_refusals_of_runs_that_cannot_be_mixed(runs):
    make_parent(runs, "full-d", method="full", seed=4)
    shutil.rmtree(runs / "full-d" / "adapter")
    make_parent(runs, "unfinished-e", seed=5, done=False)
    make_parent(runs, "other-base-f", seed=6, base="builtin:compact-mini-dates")
    make_parent(runs, "dora-g", seed=7, dora=True)
    cases = [
        ("dates-a,nowhere", "parents", "a run in your runs folder", "um treino da sua pasta"),
        ("dates-a,full-d", "parents", "a full fine-tune changes every weight", "um ajuste completo muda todos os pesos"),
        ("dates-a,unfinished-e", "parents", "a finished run", "um treino concluído"),
        ("dates-a,other-base-f", "parents", "runs of the same base model", "treinos do mesmo modelo base"),
        ("dates-a,dora-g", "parents", "cannot mix DoRA adapters", "não mistura adaptadores DoRA"),
    ]
    for parents, field, en, pt in cases:
        _refused(lambda p=parents: plan_mix(MixConfig(parents=p), runs), field, en, pt)
    assert not (runs / "mix-refused").exists()


@pytest.mark.parametrize("combination", ["linear", "ties", "dare_linear", "dare_ties"])
def test_methods_that_need_one_rank_refuse_different_ranks(runs, combination):
    _refused(lambda: plan_mix(MixConfig(parents="dates-a,wide-c", combination=combination), runs), "combination",
             "svd or cat for runs of different LoRA ranks (dates-a: 4, wide-c: 8)", "svd ou cat para treinos de postos LoRA diferentes")


def test_qlora_with_lora_is_mixed_on_the_16_bit_base_with_a_warning(runs):
    make_parent(runs, "q-h", method="qlora", seed=8)
    make_parent(runs, "q-i", method="qlora", seed=9)
    plan = plan_mix(MixConfig(parents="dates-a,q-h"), runs)
    assert plan.quant is None and len(plan.warnings) == 1
    assert "q-h trained on a 4-bit base" in plan.warnings[0] and "base de 4 bits" in plan.warnings[0].render("pt-BR")
    write_mix_run(plan, runs / "mix-q-lora")
    assert load_config(runs / "mix-q-lora" / "config.yaml").method == "lora"
    shutil.rmtree(runs / "mix-q-lora")
    both = plan_mix(MixConfig(parents="q-h,q-i"), runs)  # two QLoRA runs: the mix stays QLoRA, no warning
    assert both.quant is not None and both.quant.mode == "4bit" and not both.warnings


# ---- the mix as a job: the CLI in a subprocess, the app's job manager, one job at a time, only your own runs ----

def _cli(runs: Path, *args: str):
    import os
    import subprocess
    import sys

    env = {**os.environ, "COMPACT_LAB_RUNS": str(runs), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "engine", "mix", *args], capture_output=True, text=True, env=env, timeout=600,
                          cwd=Path(__file__).resolve().parents[2])


def test_the_cli_mixes_into_a_finished_run_and_refuses_with_the_field_named(runs):
    from engine.export.card import model_card

    done = _cli(runs, "--parents", "dates-a,instr-b", "--combination", "dare_ties", "--weights", "1,0.5", "--density", "0.7", "--no-score",
                "--run-name", "cli-mix")
    assert done.returncode == 0, done.stderr[-2000:]
    s = summarize(runs / "cli-mix", alive=False)
    assert s.state == "finished" and s.output == "adapter" and (runs / "cli-mix" / "adapter" / "adapter_model.safetensors").exists()
    assert read_mix(runs / "cli-mix").weights == "1,0.5"
    card = model_card(runs / "cli-mix", "adapter", "someone/cli-mix")
    assert "mixing the adapters of 2 runs with **dare_ties**" in card and "| dates-a |" in card and "density 0.7" in card
    refused = _cli(runs, "--parents", "dates-a", "--run-name", "cli-refused")
    assert refused.returncode == 2 and "parents = 'dates-a' is not allowed: two or more" in refused.stderr and not (runs / "cli-refused").exists()


def test_the_job_manager_mixes_in_a_subprocess_one_job_at_a_time_and_only_your_runs(runs):
    import os
    import time

    from engine.errors import JobError
    from engine.training.jobs import JobManager
    from engine.training.mix_job import start_mix
    from engine.training.processes import proc_start_time

    jobs = JobManager(runs)
    busy = runs / "dates-a" / "pid"  # a run that looks alive: no mix beside it
    busy.write_text(f"{os.getpid()} {proc_start_time(os.getpid()) or ''}\n")
    try:
        with pytest.raises(JobError, match="busy"):
            start_mix(jobs, MixConfig(parents="dates-a,instr-b", score=False, run_name="job-busy"))
    finally:
        busy.unlink()
    assert not (runs / "job-busy").exists()
    with pytest.raises(JobError, match="you can mix only your own runs"):
        start_mix(JobManager(runs, owner_only=True), MixConfig(parents="dates-a,instr-b", score=False), owner="someone")
    name, warnings = start_mix(jobs, MixConfig(parents="dates-a,instr-b", combination="svd", score=False, run_name="job-mix"), owner="me")
    assert name == "job-mix" and warnings == [] and (runs / name / "owner").exists()
    deadline = time.time() + 300
    while time.time() < deadline and jobs.status(name).state in ("running", "created"):
        time.sleep(0.5)
    s = jobs.status(name)
    assert s.state == "finished", (runs / name / "train.log").read_text()[-2000:]
    assert jobs.may_control(name, "me") and not s.restartable
