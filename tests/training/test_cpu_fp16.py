"""fp16 mixed precision on a CPU standing in for a T4 (`COMPACT_LAB_CPU_FP16_AMP=1`, engine/training/cpu_fp16.py):
the real training path with fp16 autocast and accelerate's GradScaler, on the built-in model and a tiny Llama, for
LoRA, QLoRA (bitsandbytes 4-bit on the CPU) and full fine-tuning. The scale grows and backs off, a step with inf
gradients is skipped (weights unchanged), the scaler's state travels in checkpoints, a NaN/inf loss ends the run as
resumable, and the fp16-unsafe families compute in fp32 under `auto`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from conftest import EXCHANGES, build_tiny_hf_model, stop_requested_at, write_jsonl
from transformers import TrainerCallback

from engine.config import TrainConfig
from engine.errors import ConfigError
from engine.fields import to_dict
from engine.hardware.device import ENV_CPU_FP16_AMP, DeviceInfo, detect_device, resolve_dtype
from engine.runs import checkpoints, read_events, summarize
from engine.training import cpu_fp16
from engine.training import run as run_mod
from engine.training.run import run_training

FAST = dict(micro_batch_size=4, max_seq_len=48, logging_steps=1, eval_fraction=0.0, learning_rate=1e-3, packing=False,
            sample_generations=False, warmup_ratio=0.0, lr_scheduler="constant")
STANDIN = DeviceInfo("cpu", "CPU (stand-in)", 8.0, False, None, False, fp16_amp_standin=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    """A small chat-free instruction set (no date task, so no scoring before and after training)."""
    rows = [{"instruction": q, "output": a} for q, a in EXCHANGES] * 6
    return str(write_jsonl(tmp_path_factory.mktemp("fp16data") / "qa.jsonl", rows))


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    return str(build_tiny_hf_model(tmp_path_factory.mktemp("fp16llama") / "llama", "llama", steps=5))


@pytest.fixture
def standin(runs_dir, monkeypatch) -> Path:
    """The developer switch on, after the session's built-in base was pretrained (in fp32), and a grad scaler that
    starts at 1024 and grows every 2 steps instead of 65536 and 2000, through accelerate's own `GradScalerKwargs`
    handler: a few steps show growth, and no step overflows by itself on any CPU (only the forced one)."""
    from accelerate.utils import GradScalerKwargs

    monkeypatch.setenv(ENV_CPU_FP16_AMP, "1")
    real = cpu_fp16.install_cpu_grad_scaler

    def quick_growth(accelerator):
        accelerator.scaler_handler = GradScalerKwargs(init_scale=1024.0, growth_interval=2)
        return real(accelerator)

    monkeypatch.setattr(cpu_fp16, "install_cpu_grad_scaler", quick_growth)
    return runs_dir


class Probe(TrainerCallback):
    """The test hook: gradients made infinite during the optimizer steps in `inf_steps` (1-based), the dtype of the
    trained Linear layers' outputs, and a trained weight before and after each step."""

    def __init__(self, inf_steps: set[int] = frozenset()) -> None:
        self.inf_steps = set(inf_steps)
        self.step = 0
        self.output_dtypes: set[torch.dtype] = set()
        self.changed: dict[int, bool] = {}
        self.scales: dict[int, float] = {}
        self.scale_at_start: float | None = None
        self.trainer = None

    def on_train_begin(self, args, state, control, model=None, **kw):
        params = [p for name, p in model.named_parameters() if p.requires_grad]
        lora_b = [p for name, p in model.named_parameters() if p.requires_grad and "lora_B" in name]
        self.watched = (lora_b or params)[0]  # lora_A starts with zero gradients (lora_B is zeros): watch lora_B
        self.watched.register_hook(lambda g: g * math.inf if self.step in self.inf_steps else g)
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and any(p.requires_grad for p in module.parameters(recurse=False)):
                module.register_forward_hook(lambda m, i, o: self.output_dtypes.add(o.dtype) if m.training else None)
        self.scale_at_start = self.trainer.accelerator.scaler.get_scale() if self.trainer.accelerator.scaler else None

    def on_step_begin(self, args, state, control, **kw):
        self.step = state.global_step + 1
        self.before = self.watched.detach().clone()

    def on_step_end(self, args, state, control, **kw):
        self.changed[state.global_step] = not torch.equal(self.before, self.watched.detach())
        scaler = self.trainer.accelerator.scaler
        if scaler is not None:
            self.scales[state.global_step] = scaler.get_scale()


def _probe(monkeypatch, **kwargs) -> Probe:
    """Add a Probe to the next runs' Trainer (wrapping the run's build_trainer)."""
    probe = Probe(**kwargs)
    real = run_mod.build_trainer

    def with_probe(*args, **kw):
        built = real(*args, **kw)
        probe.trainer = built.trainer
        built.trainer.add_callback(probe)
        return built

    monkeypatch.setattr(run_mod, "build_trainer", with_probe)
    return probe


def _base(which: str, tiny_llama: str) -> str:
    return "builtin:compact-mini" if which == "builtin" else tiny_llama


# ---- the policy of the stand-in ----

def test_the_switch_gives_the_cpu_a_t4s_policy(monkeypatch):
    monkeypatch.setenv(ENV_CPU_FP16_AMP, "1")
    device = detect_device()
    assert device.kind == "cpu" and device.fp16_amp_standin and device.gpu_policy and not device.bf16
    assert resolve_dtype("auto", device) == torch.float16 and resolve_dtype("fp16", device) == torch.float16
    assert resolve_dtype("auto", device, model_type="gemma2") == torch.float32  # the family rule, as on a T4
    with pytest.raises(ConfigError, match=ENV_CPU_FP16_AMP):
        resolve_dtype("bf16", device)
    with pytest.raises(ConfigError, match="fp16 overflows"):
        resolve_dtype("fp16", device, model_type="gemma")
    monkeypatch.delenv(ENV_CPU_FP16_AMP)
    assert not detect_device().fp16_amp_standin
    with pytest.raises(ConfigError, match="Use fp16 on a GPU"):
        resolve_dtype("fp16", detect_device())


@pytest.mark.parametrize("precision", ["bf16", "no"])
def test_no_scaler_for_other_precisions(precision):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    try:
        accelerator = Accelerator(cpu=True, mixed_precision=precision)
        assert not cpu_fp16.install_cpu_grad_scaler(accelerator) and accelerator.scaler is None
    finally:
        AcceleratorState._reset_state(True)


# ---- the training path ----

@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
@pytest.mark.parametrize("which", ["builtin", "llama"])
def test_scale_grows_backs_off_and_skips_the_inf_step(which, method, standin, data, tiny_llama, monkeypatch):
    """Five steps, infinite gradients forced in step 3: the scale doubles every 2 good steps (1024 -> 2048), halves
    at the overflow, that step leaves the weights untouched, and the progress events report scale and skips."""
    probe = _probe(monkeypatch, inf_steps={3})
    cfg = TrainConfig(method=method, base_model=_base(which, tiny_llama), dataset=data, run_name=f"fp16-{which}-{method}",
                      max_steps=5, save_steps=100, **FAST)
    done = run_training(cfg, standin / cfg.run_name, runs_dir=standin)
    assert done["type"] == "done" and done["steps"] == 5
    start = read_events(standin / cfg.run_name)[0]
    assert start["dtype"] == "float16" and "fp16 mixed precision" in start["precision_note"]
    assert torch.float16 in probe.output_dtypes  # autocast: the trained layers compute in fp16
    assert probe.scales == {1: 1024.0, 2: 2048.0, 3: 1024.0, 4: 1024.0, 5: 2048.0}
    assert probe.changed == {1: True, 2: True, 3: False, 4: True, 5: True}
    progress = [e for e in read_events(standin / cfg.run_name) if e["type"] == "progress"]
    assert [e["loss_scale"] for e in progress] == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0]
    assert [e["skipped_steps"] for e in progress] == [0, 0, 1, 1, 1]
    assert all(math.isfinite(e["loss"]) for e in progress)


@pytest.mark.parametrize(("which", "method"), [("builtin", "lora"), ("llama", "qlora"), ("llama", "full")])
def test_scaler_state_is_checkpointed_and_restored_on_resume(which, method, standin, data, tiny_llama, monkeypatch):
    """Stopped after 3 steps (scale grown to 2048, one good step towards the next growth): checkpoint-3 holds
    scaler.pt, the resumed Trainer starts from its scale (a fresh one would start at 1024) and grows on the very next
    step, as the uninterrupted run would."""

    cfg = TrainConfig(method=method, base_model=_base(which, tiny_llama), dataset=data, run_name=f"fp16-resume-{which}-{method}",
                      max_steps=5, save_steps=100, **FAST)
    run_dir = standin / cfg.run_name
    with stop_requested_at(3):
        stopped = run_training(cfg, run_dir, runs_dir=standin)
    assert stopped["type"] == "stopped" and stopped["checkpoint"] == "checkpoint-3"
    saved = torch.load(run_dir / "checkpoint-3" / "scaler.pt", weights_only=True)
    assert saved["scale"] == 2048.0 and saved["_growth_tracker"] == 1

    probe = _probe(monkeypatch)
    done = run_training(cfg, run_dir, runs_dir=standin, resume=True)
    assert done["type"] == "done" and done["steps"] == 5
    assert probe.scale_at_start == 2048.0
    assert probe.scales == {4: 4096.0, 5: 4096.0}


def test_a_nan_loss_in_fp16_ends_the_run_resumable(standin, data, monkeypatch, tmp_path):
    """An overflowing loss (inf from step 3 on) under fp16 AMP: the scaler skips the step, the NaN/inf callback ends the
    run through the CLI with the fp16 advice, no checkpoint of those weights, and the run stays resumable."""
    from engine.cli import main
    from engine.training.loss import ScoredPositionsLoss

    real = ScoredPositionsLoss.compute_loss

    def overflowing(self, model, inputs, *args, **kwargs):
        loss = real(self, model, inputs, *args, **kwargs)
        return loss * math.inf if model.training and self.state.global_step >= 2 else loss

    monkeypatch.setattr(ScoredPositionsLoss, "compute_loss", overflowing)
    cfg = TrainConfig(method="lora", base_model="builtin:compact-mini", dataset=data, run_name="fp16-nan", max_steps=6, save_steps=2, **FAST)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(to_dict(cfg)), encoding="utf-8")
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(standin))
    run_dir = standin / cfg.run_name
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    err = read_events(run_dir)[-1]
    assert err["type"] == "error" and err["kind"] == "nan", err
    assert "at step 3 — fp16 overflow?" in err["message"] and "checkpoint-2" in err["message"]
    assert [step for step, _ in checkpoints(run_dir)] == [2]
    s = summarize(run_dir, alive=False)
    assert s.state == "failed" and s.resumable


def test_an_fp16_unsafe_family_computes_in_fp32_under_auto(standin, data, tmp_path):
    """A tiny Gemma under `auto` on the stand-in: fp32, as on a T4 (no autocast, no scaler, no scaler.pt); an explicit
    fp16 is refused before the run folder exists."""
    from transformers import GemmaConfig, GemmaForCausalLM

    from engine.models.tokenizer import train_tokenizer

    tokenizer = train_tokenizer([f"{q} ? {a} ." for q, a in EXCHANGES] * 4, vocab_size=320, model_max_length=64)
    config = GemmaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, max_position_embeddings=64, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    gemma = tmp_path / "gemma"
    GemmaForCausalLM(config).save_pretrained(gemma)
    tokenizer.save_pretrained(gemma)
    cfg = TrainConfig(method="lora", base_model=str(gemma), dataset=data, run_name="fp16-gemma", max_steps=2, save_steps=2, **FAST)
    done = run_training(cfg, standin / cfg.run_name, runs_dir=standin)
    assert done["type"] == "done"
    events = read_events(standin / cfg.run_name)
    assert events[0]["dtype"] == "float32" and "Gemma" in events[0]["precision_note"]
    assert not any("loss_scale" in e for e in events if e["type"] == "progress")
    assert not (standin / cfg.run_name / "checkpoint-2" / "scaler.pt").exists()

    refused = TrainConfig(method="lora", base_model=str(gemma), dataset=data, run_name="fp16-gemma-refused", precision="fp16",
                          max_steps=2, **{k: v for k, v in FAST.items()})
    with pytest.raises(ConfigError, match="fp16 overflows"):
        run_training(refused, standin / refused.run_name, runs_dir=standin)
    assert not (standin / refused.run_name).exists()
