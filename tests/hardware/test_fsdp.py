"""Issue 28: FSDP through the pinned accelerate's FSDP plugin (TrainConfig.distributed = "fsdp").

What runs here, on a CPU: the TrainingArguments that turn the plugin on, and a 2-process `accelerate launch` of the
real training command (gloo). What the pinned stack does NOT support there, and why the run is refused with a keyed
message: accelerate 1.15's AcceleratorState sets its FSDP plugin up only for GPU-like process groups; a CPU group
stays MULTI_CPU, so the Trainer would train unsharded (plain DDP) while the config says fsdp. The pinned torch (2.13)
itself shards on CPU/gloo (FSDP2 `fully_shard`, checked by hand: each rank holds half of every weight), but not
through accelerate's plugin, so not through the Trainer. QLoRA under FSDP also needs bitsandbytes' CUDA kernels.
The GPU run (two processes, NCCL) is the `gpu`-marked test below."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from engine.config import TrainConfig
from engine.runs import read_events

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_distributed import ACCELERATE, _cfg, _launch  # noqa: E402


def test_fsdp_turns_on_accelerates_fsdp2_plugin(tmp_path):
    from engine.hardware.device import detect_device
    from engine.training.trainer import fsdp_args, training_args

    cfg = TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", distributed="fsdp", gpus=2)
    args = training_args(cfg, tmp_path, detect_device(), torch.float32, has_eval=False)
    assert args.fsdp_plugin_args == {"fsdp_version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "cpu_ram_efficient_loading": False,
                                     "state_dict_type": "FULL_STATE_DICT", "reshard_after_forward": True}
    assert fsdp_args(TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", distributed="ddp")) == {}


def test_qlora_under_fsdp_stores_4bit_weights_in_the_compute_dtype():
    from engine.config import QuantSettings
    from engine.models.loading import bnb_config

    pytest.importorskip("bitsandbytes")
    q = bnb_config(QuantSettings(mode="4bit"), torch.bfloat16, quant_storage=torch.bfloat16)
    assert q.bnb_4bit_quant_storage == torch.bfloat16
    assert bnb_config(QuantSettings(mode="4bit"), torch.bfloat16).bnb_4bit_quant_storage == torch.uint8


def test_the_form_command_launches_the_chosen_number_of_gpus():
    from engine.views.finetune_form import reproduce_command

    cfg = TrainConfig(method="qlora", base_model="Qwen/Qwen2.5-0.5B", dataset="builtin:dates", distributed="fsdp", gpus=4)
    text = reproduce_command(cfg)
    assert "accelerate launch --multi_gpu --num_processes 4 -m engine train --config run.yaml" in text and "distributed: fsdp" in text


def test_the_app_starts_several_processes_with_accelerates_launcher(tmp_path, monkeypatch):
    from engine.training import jobs

    started = {}

    class Fake:
        pid = 12345

    def fake_popen(cmd, **kw):
        started["cmd"] = cmd
        return Fake()

    from engine.training import processes

    monkeypatch.setattr(processes.subprocess, "Popen", fake_popen)
    monkeypatch.setattr(processes, "proc_start_time", lambda pid: None)
    cfg = TrainConfig(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", distributed="ddp", gpus=2, run_name="t-launch")
    manager = jobs.JobManager(tmp_path)
    run_dir = tmp_path / "t-launch"
    run_dir.mkdir()
    from engine.runs import save_config

    save_config(run_dir, cfg)
    manager._launch(run_dir, resume=False)
    cmd = started["cmd"]
    assert cmd[1:5] == ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes"] and cmd[5] == "2"
    assert cmd[cmd.index("engine") - 1] == "-m" and cmd[cmd.index("engine") + 1] == "train"


@pytest.mark.skipif(not ACCELERATE.exists(), reason="accelerate's launcher is not installed in this environment")
def test_two_cpu_processes_asked_for_fsdp_are_refused_not_silently_unsharded(tmp_path):
    runs_dir = tmp_path / "runs"  # refused before any model is loaded: no pretrained built-in needed
    cfg = _cfg("t-fsdp-cpu", method="full", distributed="fsdp", gpus=2, max_steps=2)
    run_dir = runs_dir / cfg.run_name
    res = _launch(runs_dir, tmp_path, cfg, run_dir, timeout=120)
    assert res.returncode != 0
    assert "FSDP needs CUDA GPUs" in res.stdout, res.stdout[-3000:]
    assert not any(e["type"] in ("progress", "done") for e in read_events(run_dir))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus_train_one_run_with_fsdp(runs_dir, tmp_path):
    cfg = _cfg("t-fsdp-gpu", method="full", distributed="fsdp", gpus=2, max_steps=3)
    run_dir = runs_dir / cfg.run_name
    res = _launch(runs_dir, tmp_path, cfg, run_dir, timeout=300, cuda=True)
    assert res.returncode == 0, res.stdout[-4000:]
    events = read_events(run_dir)
    start = next(e for e in events if e["type"] == "start")
    assert start["world_size"] == 2 and start["distributed"] == "fsdp" and events[-1]["type"] == "done"
