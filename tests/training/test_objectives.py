"""DPO, ORPO, KTO and GRPO through the one training path on the built-in model (CPU, a few steps): the run's files and
events, the methods' metrics in the progress events and TensorBoard, the reference adapter left out of the saved
adapter, a run:NAME start, stop + resume from a checkpoint, and the CLI command of the issue."""

from __future__ import annotations

import json

import pytest
from conftest import stop_requested_at

from engine.config import TrainConfig
from engine.runs import read_events
from engine.training.run import run_training

FAST = dict(max_steps=2, micro_batch_size=4, max_seq_len=64, logging_steps=1, save_steps=2, eval_fraction=0.0, learning_rate=1e-4,
            sample_generations=False)
GRPO = dict(FAST, micro_batch_size=4, num_generations=4, max_completion_length=8, reward="dates, format:0.5")


def _progress(run_dir):
    return [e for e in read_events(run_dir) if e["type"] == "progress"]


LABELLED = [{"prompt": f"Say yes {i}", "completion": "yes" if i % 2 else "no way", "label": bool(i % 2)} for i in range(12)]


@pytest.mark.parametrize(("method", "tuning"), [("dpo", "lora"), ("dpo", "full"), ("dpo", "qlora"), ("orpo", "lora"), ("kto", "lora"), ("kto", "full"),
                                                ("grpo", "lora"), ("grpo", "qlora")])
def test_objective_runs_train_save_and_report_their_metrics(method, tuning, runs_dir, tmp_path):
    from engine.training.tensorboard import read_logdir
    from tests.conftest import write_jsonl

    # data that is not the date task's: no scoring before and after (fast)
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"Say yes {i}", "chosen": "yes", "rejected": "no way"} for i in range(12)])
    labelled = write_jsonl(tmp_path / "labelled.jsonl", LABELLED)
    dataset = {"grpo": "builtin:instructions", "kto": str(labelled)}.get(method, str(pairs))
    name = f"t-{method}-{tuning}"
    cfg = TrainConfig(method=method, tuning=tuning, base_model="builtin:compact-mini", dataset=dataset, run_name=name,
                      **(GRPO if method == "grpo" else FAST))
    run_dir = runs_dir / name
    done = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert done["type"] == "done" and done["steps"] == 2
    out = "adapter" if tuning != "full" else "model"
    assert (run_dir / out).is_dir() and (run_dir / "checkpoint-2").is_dir()
    if tuning != "full":  # DPO's and KTO's frozen reference adapter is not part of the result
        assert not (run_dir / "adapter" / "ref").exists()
        assert json.loads((run_dir / "adapter" / "adapter_config.json").read_text())["r"] == cfg.lora.r
    last = _progress(run_dir)[-1]
    wanted = {"grpo": ("reward_mean", "reward_std", "completion_len"), "kto": ("reward_margin", "kl")}.get(method, ("reward_margin", "pref_accuracy"))
    assert all(last.get(k) is not None for k in wanted), last
    memory = next(e for e in read_events(run_dir) if e["type"] == "memory")
    assert memory["predicted_gib"] > 0
    scalars = read_logdir(run_dir / "tensorboard").scalars
    assert ("train/reward" if method == "grpo" else "train/rewards/margins") in scalars
    if method == "grpo":
        completions = [e for e in read_events(run_dir) if e["type"] == "completions"]
        assert completions and {"completion", "reward", "answer"} <= set(completions[-1]["samples"][0])


def test_dpo_from_an_sft_run_and_scored_on_the_date_task(runs_dir):
    from engine.models.loading import load_model

    sft = TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:instructions", run_name="t-sft-for-dpo", **FAST)
    run_training(sft, runs_dir / sft.run_name, runs_dir=runs_dir)
    cfg = TrainConfig(method="dpo", tuning="full", base_model="run:t-sft-for-dpo", dataset="builtin:preferences", run_name="t-dpo-run",
                      **{**FAST, "max_seq_len": 96})
    done = run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    assert done["type"] == "done"
    scores = {e["when"] for e in read_events(runs_dir / cfg.run_name) if e["type"] == "task_score"}
    assert scores == {"before", "after"}  # builtin:preferences holds the date task's pairs
    assert load_model("run:t-dpo-run", runs_dir=runs_dir).model is not None


def test_grpo_stops_at_a_checkpoint_and_resumes(runs_dir):
    cfg = TrainConfig(method="grpo", tuning="lora", base_model="builtin:compact-mini", dataset="builtin:instructions", run_name="t-grpo-stop",
                      **{**GRPO, "max_steps": 4, "save_steps": 100})
    run_dir = runs_dir / cfg.run_name
    run_dir.mkdir()

    with stop_requested_at(2):
        stopped = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert stopped["type"] == "stopped" and stopped["checkpoint"] == "checkpoint-2"
    done = run_training(cfg, run_dir, runs_dir=runs_dir, resume=True)
    assert done["type"] == "done" and done["steps"] == 4
    starts = [e for e in read_events(run_dir) if e["type"] == "start"]
    assert starts[-1]["resumed_from"] == "checkpoint-2" and (run_dir / "adapter").is_dir()


def test_the_issues_cli_command(runs_dir, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs_dir))
    rc = main(["train", "--method", "dpo", "--base-model", "builtin:compact-mini", "--dataset", "builtin:preferences", "--max-steps", "1",
               "--micro-batch-size", "2", "--max-seq-len", "96", "--eval-fraction", "0", "--run-name", "t-cli-dpo"])
    assert rc == 0 and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["type"] == "done"
    rc = main(["train", "--method", "grpo", "--base-model", "builtin:compact-mini", "--dataset", "builtin:dates", "--reward", "dates",
               "--max-steps", "1", "--micro-batch-size", "4", "--num-generations", "4", "--max-completion-length", "6", "--eval-fraction", "0",
               "--run-name", "t-cli-grpo"])
    assert rc == 0
    done = read_events(runs_dir / "t-cli-grpo")[-1]
    assert done["type"] == "done"


def test_a_dpo_lora_run_merges_exports_to_gguf_and_zips(runs_dir, tmp_path):
    """The run folder of a preference run is an SFT run's: its adapter merges, the merged model exports to GGUF and the
    run zips (the page's and the CLI's exports call these)."""
    import zipfile

    from engine.config import GgufSettings
    from engine.export.gguf import export_gguf
    from engine.export.merge import merge_adapter, zip_run
    from engine.hardware.device import detect_device
    from tests.conftest import write_jsonl

    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": f"Say yes {i}", "chosen": "yes", "rejected": "no way"} for i in range(8)])
    cfg = TrainConfig(method="dpo", tuning="lora", base_model="builtin:compact-mini", dataset=str(pairs), run_name="t-dpo-export",
                      **{**FAST, "max_steps": 1})
    run_dir = runs_dir / cfg.run_name
    assert run_training(cfg, run_dir, runs_dir=runs_dir)["type"] == "done"
    merged = merge_adapter(run_dir, device=detect_device())
    assert (merged / "model.safetensors").exists()
    result = export_gguf(merged, tmp_path / "gguf", GgufSettings(type="f16"))
    assert result.gguf_path.exists() and result.gguf_path.suffix == ".gguf"
    with zipfile.ZipFile(zip_run(run_dir, out_path=tmp_path / "run.zip")) as zf:
        assert any(n.endswith("adapter/adapter_config.json") for n in zf.namelist())


def test_kto_stops_at_a_checkpoint_and_resumes(runs_dir, tmp_path):
    from tests.conftest import write_jsonl

    data = write_jsonl(tmp_path / "labelled.jsonl", LABELLED)
    cfg = TrainConfig(method="kto", tuning="lora", base_model="builtin:compact-mini", dataset=str(data), run_name="t-kto-stop",
                      **{**FAST, "max_steps": 4, "save_steps": 100})
    run_dir = runs_dir / cfg.run_name
    run_dir.mkdir()
    with stop_requested_at(2):
        stopped = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert stopped["type"] == "stopped" and stopped["checkpoint"] == "checkpoint-2"
    done = run_training(cfg, run_dir, runs_dir=runs_dir, resume=True)
    assert done["type"] == "done" and done["steps"] == 4
    phases = [e["phase"] for e in read_events(run_dir) if e["type"] == "phase"]
    assert any(p.startswith("KTO: 6 good and 6 bad answers") for p in phases)


def test_kto_from_the_cli_on_the_builtin_feedback_as_a_subprocess(runs_dir):
    """`python -m engine train --method kto` on builtin:feedback, as a person types it: a real process, scored on the date
    task before and after (builtin:feedback holds the date task's answers)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "COMPACT_LAB_RUNS": str(runs_dir), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "engine", "train", "--method", "kto", "--base-model", "builtin:compact-mini", "--dataset", "builtin:feedback",
           "--max-steps", "1", "--micro-batch-size", "2", "--max-seq-len", "96", "--eval-fraction", "0", "--run-name", "t-cli-kto"]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["type"] == "done"
    events = read_events(runs_dir / "t-cli-kto")
    assert {e["when"] for e in events if e["type"] == "task_score"} == {"before", "after"}
    data = next(e for e in events if e["type"] == "data")
    assert data["kind"] == "labelled" and data["good"] + data["bad"] == data["train_examples"] == 494
    assert (runs_dir / "t-cli-kto" / "adapter" / "adapter_config.json").exists()


def test_kto_learns_to_prefer_the_answers_marked_good(runs_dir, tmp_path):
    """Outcome, not mechanism: on answers marked good ("yes") and bad ("no way"), the good answers' implicit reward
    pulls ahead of the bad ones' (this run under the tests' settings on this CPU: 0.0 at step 1, 0.07 at 5, 0.35 at 10, 1.15
    at 30; the same run outside the test session reached 6.3)."""
    from tests.conftest import write_jsonl

    rows = [{"prompt": f"Say yes {i}", "completion": "yes" if i % 2 else "no way", "label": bool(i % 2)} for i in range(16)]
    data = write_jsonl(tmp_path / "labelled.jsonl", rows)
    cfg = TrainConfig(method="kto", tuning="full", base_model="builtin:compact-mini", dataset=str(data), run_name="t-kto-learns",
                      **{**FAST, "max_steps": 30, "micro_batch_size": 8, "logging_steps": 5, "save_steps": 100})
    assert run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)["type"] == "done"
    margins = [e["reward_margin"] for e in _progress(runs_dir / cfg.run_name) if e.get("reward_margin") is not None]
    assert abs(margins[0]) < 0.1 and margins[-1] > 0.5 and margins == sorted(margins), margins
