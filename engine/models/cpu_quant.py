"""CPU int8 dynamic quantization (`QuantSettings(mode="int8-dynamic")`) and footprints of quantized models.

`torch.ao.quantization.quantize_dynamic` swaps every `nn.Linear` for a dynamically quantized one: weights are
stored as int8 with one fp32 scale per tensor, activations are quantized on the fly per matmul, and the
matmul runs in fbgemm/onednn int8 kernels. It is CPU inference only (no CUDA kernels, no backward), which is
why the loader refuses it on a GPU (`check_device`) and merges a LoRA adapter before quantizing.

Tied lm_head (CompactLLM, GPT-2, most small models tie it to the token embedding): quantizing swaps the head
for an int8 copy of the shared matrix while the embedding keeps its fp32 copy. The tie is gone, which costs
vocab x hidden bytes (int8) beside the fp32 table, but the head is the largest single matmul of a small model.
Measured on compact-course (random weights, 2-core CPU, 64 greedy tokens): fp32 146 tok/s 54 MiB; int8 with the
head 361 tok/s 27 MiB; int8 with the head left fp32 and tied 259 tok/s 24 MiB. So the head is quantized too.
On compact-mini (hidden 192) int8 is about as fast as fp32: the matrices are too small for the int8 kernels to
pay off. Accuracy: greedy tokens equal fp32 for 64 tokens on compact-course and for 36 on the pretrained
compact-mini (then a near-tie flips, with or without the head quantized); the tiny test model gives the same
text. Nothing re-ties the weights afterwards: `generate` never calls `tie_weights`, and a quantized model is
never saved or trained.

Memory: the quantizer reads the fp32 weights from the memory-mapped checkpoint; the tensors that stay fp32 and
the packed layers' biases are copied out of the mapping so that it is released, and freed memory is handed back
to the OS (`_release_freed_memory`): without both, the process kept the fp32 checkpoint resident beside the int8
model (RSS growth ~95 MiB instead of ~25 MiB on compact-course).

`get_memory_footprint` misses the packed int8 weights (they are neither parameters nor buffers), so
`footprint_bytes` counts every tensor in the state dict (packed weights included) once per storage.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import warnings
from typing import Any

import torch

from ..errors import ConfigError
from ..hardware.device import DeviceInfo


def check_device(device: DeviceInfo) -> None:
    """Raise ConfigError unless int8-dynamic can run on `device` (the CPU)."""
    if device.kind != "cpu":
        raise ConfigError("quant.mode", "int8-dynamic", allowed_key="error.cpu_quant.gpu", gpu=device.name)


def quantize_int8_dynamic(model: torch.nn.Module) -> torch.nn.Module:
    """Quantize every nn.Linear of an fp32 CPU model to dynamic int8, in place; returns the model (eval mode).

    In place because `quantize_dynamic`'s default deep copy would hold two models in memory at once and
    would also untie the copy's embedding from the original head.
    """
    param = next(model.parameters(), None)
    if param is not None and (param.device.type != "cpu" or param.dtype != torch.float32):
        raise ConfigError("quant.mode", "int8-dynamic", allowed_key="error.cpu_quant.fp32_cpu", dtype=str(param.dtype).removeprefix("torch."),
                          device=str(param.device))
    model.eval()
    # transformers maps the safetensors file into memory, and a tensor left pointing into it keeps the whole
    # file mapped, with every page the quantizer read resident: the process would hold the fp32 checkpoint
    # beside the int8 model. The packed layers keep their fp32 bias tensor as given, so biases get their own
    # memory first; the unquantized rest (embeddings, norms) after quantizing.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.data = module.bias.data.clone()
    with warnings.catch_warnings():
        # torch 2.10+ marks torch.ao eager quantization as deprecated in favour of torchao; it still works and
        # needs no extra package. The warning would repeat on every load, so it is silenced here.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            tensor.data = tensor.data.clone()
    _release_freed_memory()
    return model


def _release_freed_memory() -> None:
    """Hand the freed fp32 weights back to the OS. glibc keeps large freed blocks in its heap (its mmap threshold
    grows after big frees), so without a trim the process RSS stays at the fp32 size (measured on compact-course:
    ~95 MiB of RSS growth before, ~25 MiB after, for a 27 MiB int8 model). A no-op where there is no glibc."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # macOS, Windows, musl: nothing to trim this way
        pass


def is_int8_dynamic(module: torch.nn.Module) -> bool:
    """Whether `module` is a torch dynamically quantized Linear."""
    return isinstance(module, torch.ao.nn.quantized.dynamic.Linear)


def footprint_bytes(model: torch.nn.Module) -> int:
    """Bytes held by the model's tensors (parameters, buffers and packed quantized weights), shared storages once.

    Unlike `PreTrainedModel.get_memory_footprint`, this sees the int8 weights of dynamically quantized
    layers; on any other model it agrees with it (tied weights are counted once in both).
    """
    seen: set[tuple[str, int]] = set()
    total = 0

    def add(t: Any) -> None:
        nonlocal total
        if isinstance(t, (tuple, list)):
            for x in t:
                add(x)
            return
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        if t.is_quantized:
            # a quantized tensor's storage is its int values; scales are per tensor (or per channel: small)
            key = ("q", id(t))
            size = t.numel() * t.element_size()
        else:
            key = (t.device.type, t.untyped_storage().data_ptr())
            size = t.untyped_storage().nbytes()
        if key not in seen:
            seen.add(key)
            total += size

    for value in model.state_dict(keep_vars=True).values():
        add(value)
    return total
