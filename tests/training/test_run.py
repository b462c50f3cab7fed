"""End to end on CPU: every method trains for a few steps on the built-in model and data, then generates."""

from __future__ import annotations

import json

import pytest
from conftest import stop_requested_at

from engine.config import GenerationSettings, TrainConfig
from engine.runs import read_events
from engine.training.run import run_training

FAST = dict(max_steps=3, micro_batch_size=4, max_seq_len=64, logging_steps=1, save_steps=2, eval_fraction=0.1, learning_rate=1e-3)


@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
def test_method_trains_and_generates(method, runs_dir):
    from engine.inference.generate import generate_text
    from engine.models.loading import load_model

    cfg = TrainConfig(method=method, base_model="builtin:compact-mini", dataset="builtin:dates", run_name=f"t-{method}", **FAST)
    run_dir = runs_dir / cfg.run_name
    done = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert done["type"] == "done" and done["steps"] == 3
    out = "adapter" if method in ("lora", "qlora") else "model"
    assert (run_dir / out).is_dir() and not (run_dir / f".{out}.tmp").exists()
    events = read_events(run_dir)
    types = [e["type"] for e in events]
    assert types[0] == "start" and "progress" in types and types[-1] == "done"
    progress = [e for e in events if e["type"] == "progress"]
    for key in ("step", "epoch", "loss", "lr", "tokens_per_s", "elapsed_s", "eta_s", "mem_gib", "max_steps"):
        assert key in progress[-1], key
    scores = {e["when"]: e["accuracy"] for e in events if e["type"] == "task_score"}
    assert set(scores) == {"before", "after"}
    # the measurements report their own progress (answers so far, time left) and how long they took
    measured = [e for e in events if e["type"] == "task_progress"]
    assert {e["when"] for e in measured} == {"before", "after"} and measured[-1]["done"] == measured[-1]["total"] == 100
    assert all(e["eta_s"] is not None for e in measured)
    assert all(e["seconds"] >= 0 for e in events if e["type"] == "task_score")
    assert (run_dir / "config.yaml").exists() and "checkpoint-2" in {p.name for p in run_dir.iterdir()}
    loaded = load_model(f"run:{cfg.run_name}", runs_dir=runs_dir)
    text = generate_text(loaded, "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", GenerationSettings(max_new_tokens=8, do_sample=False))
    assert isinstance(text, str)


def test_scratch_trains_own_tokenizer(runs_dir):
    from engine.models.loading import load_model

    cfg = TrainConfig(method="scratch", base_model="builtin:compact-mini", dataset="builtin:corpus", run_name="t-scratch", **FAST)
    done = run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    assert done["output"] == "model"
    model_dir = runs_dir / "t-scratch" / "model"
    assert (model_dir / "tokenizer.json").exists()
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == "compact_llm"
    loaded = load_model("run:t-scratch", runs_dir=runs_dir)
    assert loaded.tokenizer.chat_template


def test_stop_file_saves_and_resume_finishes(runs_dir):
    cfg = TrainConfig(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", run_name="t-stop",
                      **{**FAST, "max_steps": 6, "save_steps": 100})
    run_dir = runs_dir / cfg.run_name
    run_dir.mkdir()
    # A stop requested after step 2: the run saves a checkpoint there and exits cleanly.
    with stop_requested_at(2):
        stopped = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert stopped["type"] == "stopped" and stopped["step"] == 2 and stopped["checkpoint"] == "checkpoint-2"
    done = run_training(cfg, run_dir, runs_dir=runs_dir, resume=True)
    assert done["type"] == "done" and done["steps"] == 6
    starts = [e for e in read_events(run_dir) if e["type"] == "start"]
    assert starts[-1]["resumed_from"] == "checkpoint-2"


def test_stop_at_loss_finishes_early_and_saves(runs_dir):
    cfg = TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", run_name="t-stoploss", stop_at_loss=50.0,
                      **{**FAST, "max_steps": 20})
    done = run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    assert done["type"] == "done" and done["steps"] == 1  # the first logged loss (< 50) ends the run
    assert (runs_dir / cfg.run_name / "model" / "config.json").exists()


@pytest.mark.parametrize("extra", [{"quant": {"mode": "8bit"}}, {"lora": {"use_rslora": True, "use_dora": True, "r": 4}}],
                         ids=["lora-on-8bit", "rslora-dora"])
def test_lora_variants_train(extra, runs_dir):
    from engine.fields import from_dict

    name = "t-" + ("8bit" if "quant" in extra else "dora")
    # builtin:instructions: no date-task scoring (DoRA recomputes weight norms at every decoding step: slow on CPU)
    cfg = from_dict(TrainConfig, {"method": "lora", "base_model": "builtin:compact-mini", "dataset": "builtin:instructions", "run_name": name,
                                  **{**FAST, "eval_fraction": 0.0}, "max_steps": 2, **extra})
    done = run_training(cfg, runs_dir / name, runs_dir=runs_dir)
    assert done["type"] == "done" and (runs_dir / name / "adapter").is_dir()
    adapter_cfg = json.loads((runs_dir / name / "adapter" / "adapter_config.json").read_text())
    if "lora" in extra:
        assert adapter_cfg["use_dora"] and adapter_cfg["use_rslora"]
