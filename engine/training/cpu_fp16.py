"""fp16 mixed precision on a CPU, wired as accelerate wires it on a T4: the developer switch's training half.

With `COMPACT_LAB_CPU_FP16_AMP=1` (engine/hardware/device.py) a CPU stands in for a GPU without bf16, so a run
resolves to fp16 and its `TrainingArguments` say `fp16=True, use_cpu=True`. accelerate 1.15 then builds no scaler:
`Accelerator.__init__` enables native AMP and a `GradScaler` for fp16 only when `self.device.type != "cpu"`, so it
leaves `native_amp=False, scaler=None` — no autocast, no loss scaling — and the model would compute in plain fp16
(LoRA on an fp16 base) or plain fp32 (full fine-tune, fp32 master weights).

Route taken: *through* accelerate. Right after the Trainer creates its `Accelerator` (and before `train()`
prepares the model and optimizer), `install_cpu_grad_scaler` sets the two attributes accelerate would have set on
a GPU — `native_amp=True` and `scaler=torch.amp.GradScaler("cpu", **GradScalerKwargs)` — with the same kwargs
accelerate reads from a `GradScalerKwargs` handler (defaults: init_scale 65536, growth 2.0 every 2000 steps,
backoff 0.5). Everything after that is library code exactly as on a T4: `prepare_model` wraps the forward in
`torch.autocast("cpu", dtype=torch.float16)` (accelerate's `get_mixed_precision_context_manager` takes the device
type from its state) with outputs converted to fp32; `Accelerator.backward` calls `scaler.scale(loss).backward()`;
`clip_grad_norm_` unscales first; `AcceleratedOptimizer.step` calls `scaler.step` and `scaler.update`; the Trainer
saves `scaler.pt` in each checkpoint and loads it on resume (`Trainer._save_scaler` / `_load_scaler`). The
alternative, an autocast and a scaler of our own beside accelerate, would have re-implemented each of those steps
and so tested our copy, not the T4 path.

Only the "cpu" device type differs from a T4's `GradScaler("cuda")`; both share torch's `GradScaler` class.
"""

from __future__ import annotations

from typing import Any

import torch


def install_cpu_grad_scaler(accelerator: Any) -> bool:
    """Give an fp16 `Accelerator` on a CPU the native AMP and `GradScaler` it builds on a GPU (module doc); returns
    whether it did (False for any other device or precision, or when a scaler is already there)."""
    if accelerator.device.type != "cpu" or accelerator.mixed_precision != "fp16" or accelerator.scaler is not None:
        return False
    handler = accelerator.scaler_handler  # accelerate's GradScalerKwargs, when the caller passed one
    kwargs = handler.to_kwargs() if handler is not None else {}
    accelerator.scaler = torch.amp.GradScaler("cpu", **kwargs)
    accelerator.native_amp = True
    return True


class CpuFp16Amp:
    """Mixed into a run's `Trainer`: fp16 mixed precision on a CPU through accelerate (`install_cpu_grad_scaler`),
    installed as soon as the Trainer has created its accelerator. A no-op on a GPU and for bf16/fp32 runs."""

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        install_cpu_grad_scaler(self.accelerator)
