"""Where each part of a loaded model lives: device and storage format per module group, for the UI.

`describe_placement(model, is_int8_dynamic=...)` walks the leaf modules that hold weights and groups them the
way a person thinks of a decoder: the embeddings, each transformer block (consecutive blocks that look the same are
merged: `model.layers.0-5`), the final norm and the head. Each group maps to one line such as
``cuda:0 · 4-bit nf4 (bitsandbytes)``, ``cpu (offloaded) · fp16``, ``disk (offloaded) · fp16`` or
``cpu · int8 dynamic``. With `device_map="auto"`, accelerate records its decision in `model.hf_device_map`
(module name -> GPU index, "cpu" or "disk"); offloaded weights sit on the meta device between forwards, so the
map, not the tensors, says where they are.

Hardware sits below the models layer, so it does not know torch's quantized layer types itself: the caller
(`LoadedModel.placement`) passes engine/models/cpu_quant.py's `is_int8_dynamic` as a predicate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .device import dtype_name

_INDEXED = re.compile(r"^(.*?\.)(\d+)(?:\.|$)")  # "model.layers.3.mlp.up_proj" -> ("model.layers.", "3")
_PEFT_PREFIX = "base_model.model."


def _device_text(value: Any, has_gpu: bool) -> str:
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return f"cuda:{value}"
    if isinstance(value, torch.device):
        value = str(value)
    if value in ("cpu", "disk"):
        # With a GPU in the map, accelerate streams these weights to the GPU for each forward.
        return f"{value} (offloaded)" if has_gpu or value == "disk" else value
    return str(value)


def _lookup(device_map: Mapping[str, Any], name: str) -> Any:
    """The device_map entry covering module `name` (longest matching prefix; "" covers everything)."""
    best, best_len = None, -1
    for key, value in device_map.items():
        if (key == "" or name == key or name.startswith(key + ".")) and len(key) > best_len:
            best, best_len = value, len(key)
    return best


def _kind(module: torch.nn.Module, tied_to: str | None, int8_dynamic: bool) -> str:
    """Storage format of one leaf module's weight (int8_dynamic: it is a torch dynamically quantized Linear)."""
    if int8_dynamic:
        return "int8 dynamic"
    cls = type(module).__name__
    weight = getattr(module, "weight", None)
    if cls in ("Linear4bit", "LinearNF4", "LinearFP4"):
        state = getattr(weight, "quant_state", None)
        qtype = getattr(state, "quant_type", None) or getattr(weight, "quant_type", "nf4")
        return f"4-bit {qtype} (bitsandbytes)"
    if cls == "Linear8bitLt":
        return "int8 (bitsandbytes)"
    if isinstance(weight, torch.Tensor):
        text = dtype_name(weight.dtype)
    else:
        tensors = list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))
        if not tensors:
            return ""
        text = dtype_name(tensors[0].dtype)
    return f"{text} (tied to {tied_to})" if tied_to else text


def _group(name: str) -> str:
    """Group key: the name up to its first numeric index (a block), else the module's own name."""
    m = _INDEXED.match(name)
    return f"{m.group(1)}{m.group(2)}" if m else name


def describe_placement(model: Any, *, is_int8_dynamic: Callable[[torch.nn.Module], bool]) -> dict[str, str]:
    """{module group: "device · storage"} in model order (see the module docstring).

    is_int8_dynamic: whether a module is a torch dynamically quantized Linear (engine/models/cpu_quant.py).
    LoRA adapter layers of a peft model are listed inside their block as "+ LoRA <dtype>".
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    device_map = getattr(base, "hf_device_map", None) or {}
    has_gpu = any(_device_text(v, False).startswith("cuda") for v in device_map.values())

    first_owner: dict[int, str] = {}  # weight storage -> first module that holds it (tied weights)
    groups: dict[str, tuple[list[str], list[str]]] = {}  # group -> (devices, kinds), first-seen order
    for name, module in base.named_modules():
        int8_dynamic = is_int8_dynamic(module)
        if next(module.children(), None) is not None and not int8_dynamic:
            continue  # only leaves hold weights here (a quantized Linear has a packed-params child)
        if not int8_dynamic and not any(True for _ in module.parameters(recurse=False)):
            continue
        name = name.removeprefix(_PEFT_PREFIX)
        weight = getattr(module, "weight", None)
        tied_to = None
        if isinstance(weight, torch.Tensor) and weight.device.type != "meta":
            ptr = weight.untyped_storage().data_ptr()
            tied_to = first_owner.setdefault(ptr, name)
            tied_to = None if tied_to == name else tied_to
        kind = _kind(module, tied_to, int8_dynamic)
        if "lora_" in name:
            kind = f"LoRA {kind.split(' ')[0]}"
        if device_map:
            device = _device_text(_lookup(device_map, name), has_gpu)
        elif int8_dynamic:
            device = "cpu"
        else:
            device = str(weight.device if isinstance(weight, torch.Tensor) else next(module.parameters()).device)
        devices, kinds = groups.setdefault(_group(name), ([], []))
        if device not in devices:
            devices.append(device)
        if kind and kind not in kinds:
            kinds.append(kind)

    described = {g: f"{', '.join(d)} · {' + '.join(k)}" for g, (d, k) in groups.items()}
    return _merge_runs(described)


def _merge_runs(described: dict[str, str]) -> dict[str, str]:
    """Collapse consecutive indexed groups with equal descriptions: layers.0 .. layers.5 -> layers.0-5."""
    out: dict[str, str] = {}
    run: tuple[str, int, int, str] | None = None  # (prefix, first index, last index, description)

    def flush() -> None:
        if run is not None:
            prefix, lo, hi, text = run
            out[f"{prefix}{lo}" if lo == hi else f"{prefix}{lo}-{hi}"] = text

    for name, text in described.items():
        m = re.fullmatch(r"(.*\.)(\d+)", name)
        if m and run is not None and run[0] == m.group(1) and run[2] + 1 == int(m.group(2)) and run[3] == text:
            run = (run[0], run[1], int(m.group(2)), text)
            continue
        flush()
        run = (m.group(1), int(m.group(2)), int(m.group(2)), text) if m else None
        if run is None:
            out[name] = text
    flush()
    return out


def summarize_device_map(device_map: Mapping[str, Any] | None) -> str:
    """One line for `LoadedModel.where`: how many modules accelerate put on each device ("" without a map)."""
    if not device_map:
        return ""
    has_gpu = any(_device_text(v, False).startswith("cuda") for v in device_map.values())
    counts: dict[str, int] = {}
    for value in device_map.values():
        key = _device_text(value, has_gpu)
        counts[key] = counts.get(key, 0) + 1
    if len(counts) == 1:
        return f"all on {next(iter(counts))}"
    return "split: " + ", ".join(f"{n} module group{'s' if n > 1 else ''} on {d}" for d, n in counts.items())
