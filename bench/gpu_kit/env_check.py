"""Section a, the environment: torch, CUDA, the driver and the card; bitsandbytes' own CUDA self-test; what the app's
start-up lines say (engine/hardware/startup.py `device_lines`); the versions of every package the kit carries against
the ones it should have (an install that silently kept the image's version shows here); the torch floor check."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from typing import Any

from .common import Context, engine_env

TITLE = "environment"
CAP_S = 35
NEEDS_CUDA = False


def run(ctx: Context) -> None:
    import torch

    ctx.record("torch", {"version": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                         "python": platform.python_version()})
    with ctx.part("card") as part:
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            free, total = torch.cuda.mem_get_info()
            part.update(name=props.name, capability=f"{props.major}.{props.minor}", total_gib=round(props.total_memory / 2**30, 2),
                        free_gib=round(free / 2**30, 2), multiprocessors=props.multi_processor_count, bf16=torch.cuda.is_bf16_supported())
        else:
            part.update(name="no CUDA card")
    with ctx.part("nvidia_smi") as part:
        from engine.hardware.nvidia import describe, find_gpus

        part["gpus"] = [describe(g) for g in find_gpus()]
    with ctx.part("versions") as part:
        part.update(versions())
    with ctx.part("imports") as part:
        part.update(imports())
    with ctx.part("torch_floor") as part:
        from engine.hardware.torch_support import MIN_TORCH, missing_feature

        part.update(minimum=".".join(map(str, MIN_TORCH)), missing=missing_feature(torch.__version__))
    with ctx.part("device_lines") as part:
        from engine.hardware.device import detect_device, precision_reason
        from engine.hardware.startup import device_lines

        device = detect_device()
        part.update(lines=device_lines(device, lang="en"), device=device.name, capability=device.capability, bf16=device.bf16,
                    auto_precision=precision_reason(device, "llama", "en"))
    if ctx.dry_run or not torch.cuda.is_available():
        ctx.record("bitsandbytes_selftest", {"status": "skipped", "reason": "needs CUDA"})
        return
    with ctx.part("bitsandbytes_selftest", min_left_s=15) as part:
        if part is not None:
            # `python -m bitsandbytes` is the library's own diagnostic: the CUDA setup it found and a small 8-bit and
            # 4-bit self-test on the GPU ("SUCCESS!" at the end when everything works)
            proc = subprocess.run([sys.executable, "-m", "bitsandbytes"], capture_output=True, text=True, env=engine_env(),
                                  timeout=max(10.0, min(90.0, ctx.left() - 5)))
            text = proc.stdout + proc.stderr
            part.update(returncode=proc.returncode, success="SUCCESS" in text, tail=text[-2500:])
            if not part["success"]:
                raise RuntimeError(f"bitsandbytes' self-test printed no SUCCESS (exit {proc.returncode})")


IMPORTS = ("transformers", "accelerate", "peft", "bitsandbytes", "datasets", "trl", "tensorboardX", "liger_kernel", "engine.training.run")


def imports() -> dict[str, str]:
    """{module: "ok" or the error}: what the later sections import, tried here first (a kit package that does not go
    with the image, e.g. datasets with an older pyarrow, shows here rather than as five failed sections)."""
    import importlib

    out = {}
    for name in IMPORTS:
        try:
            importlib.import_module(name)
            out[name] = "ok"
        except Exception as exc:  # any import failure is the finding
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def versions() -> dict[str, Any]:
    """{name: the version found} for every package the kit carries and every one image.yaml lists (correct image.yaml's
    `have` from it), with the carried ones that differ from the kit (an install that kept the image's version)."""
    from .prepare import carry_list, image

    found, differ = {}, {}
    listed = [(name, None) for name in image().get("have", {})]
    for name, want in [*listed, *carry_list()]:
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        found[name] = have
        if want is not None and have != want:
            differ[name] = {"found": have, "kit": want}
    return {"found": found, "differ": differ}


def summary(r: dict[str, Any]) -> list[str]:
    card, torch_info = r.get("card", {}), r.get("torch", {})
    lines = [f"- card: {card.get('name')} (cc {card.get('capability')}, {card.get('total_gib')} GiB, bf16 {card.get('bf16')})",
             f"- torch {torch_info.get('version')} (CUDA {torch_info.get('cuda')}), Python {torch_info.get('python')}",
             f"- nvidia-smi: {', '.join(r.get('nvidia_smi', {}).get('gpus', [])) or 'none'}"]
    st = r.get("bitsandbytes_selftest", {})
    lines.append(f"- bitsandbytes self-test: {'SUCCESS' if st.get('success') else st.get('reason') or st.get('error') or 'no SUCCESS line'}")
    lines += [f"- start-up line: {line}" for line in r.get("device_lines", {}).get("lines", [])]
    lines.append(f"- auto precision: {r.get('device_lines', {}).get('auto_precision')}")
    failed = {k: v for k, v in r.get("imports", {}).items() if k not in ("status", "seconds") and v != "ok"}
    lines.append("- imports: " + ("all ok" if not failed else "; ".join(f"{k}: {v}" for k, v in failed.items())))
    differ = r.get("versions", {}).get("differ", {})
    lines.append("- versions: " + ("as the kit carries them" if not differ else "DIFFER: " + ", ".join(f"{k} {v['found']} (kit {v['kit']})" for k, v in differ.items())))
    return lines
