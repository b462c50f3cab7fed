"""Hosted notebooks (Colab, Kaggle): check the runtime, install without breaking its torch, launch the app visibly.

colab_launch.ipynb calls these three steps, one per cell; each prints what it found and what it did, and raises
`NotebookStop` (the cell turns red and "Run all" stops) when the next step cannot work:

1. `check_runtime`: the GPU (name, memory, driver, the CUDA version the driver supports) from `nvidia-smi`; no GPU
   stops with the exact menu path to get one (Colab: Runtime → Change runtime type → T4 GPU), unless
   ``COMPACT_LAB_ALLOW_CPU=1`` (then it only warns: everything works on a CPU, slowly).
2. `install`: requirements.txt without its torch line when the runtime's torch is kept (`torch_plan`): a working torch
   the driver can run is never replaced by the registry's build (torch 2.13.0 from PyPI is a CUDA 13 build, ~2.7 GB,
   which needs an NVIDIA driver >= 580 that free runtimes may not have). A torch outside `TORCH_RANGE`, or one that
   cannot see the GPU, stops with what to do. A constraints file pins the kept torch, so no other package can upgrade
   it behind our back. ``COMPACT_LAB_PIP_OPTIONS`` adds pip options (the tests install offline with ``--no-index``).
3. `launch`: `python app.py ...` as a child process whose output is shown line by line; when gradio cannot make the
   share link, the app is opened through Colab's own port proxy (`google.colab.output.serve_kernel_port_as_window`),
   with one line saying so; an app that exits with an error raises (a crashed app never shows as a green cell);
   stopping the cell stops the app.

Only the standard library is imported at module level: the first cell runs before anything is installed.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .hardware.nvidia import Gpu, describe, find_gpus
from .hardware.torch_support import MIN_TORCH

ALLOW_CPU_ENV = "COMPACT_LAB_ALLOW_CPU"
PIP_OPTIONS_ENV = "COMPACT_LAB_PIP_OPTIONS"
# The runtime torch we keep: from transformers 5.23's floor (torch>=2.6) up to bitsandbytes 0.50's ceiling (torch<3);
# the app's own tests run on torch 2.13.0 (requirements.txt).
TORCH_RANGE = (MIN_TORCH, (3, 0))  # MIN_TORCH: engine/hardware/torch_support.py says what needs it
# The registry's torch 2.13.0 is built for CUDA 13, which needs this driver (NVIDIA's CUDA 13.0 release notes: 580.65.06).
CUDA13_DRIVER = (580, 65)
MENU = {
    "colab": "Runtime → Change runtime type → T4 GPU → Save (then run this cell again)",
    "kaggle": "Settings → Accelerator → GPU T4 x2 (then run this cell again; the phone number must be verified for GPUs)",
    "other": "choose a GPU runtime in your notebook service's settings (then run this cell again)",
}
SHARE_FAILED = "Could not create share link"  # gradio's words when the public link cannot be made
PUBLIC_URL = "Running on public URL:"
LOCAL_URL = "Running on local URL:"
SHARE_WAIT_S = 20.0  # after the local URL: how long the share link may take before the proxy is used instead


class NotebookStop(RuntimeError):
    """A step cannot go on; the message says why and what to do (the notebook shows it as the cell's error)."""


def place(env: dict | None = None) -> str:
    """"colab", "kaggle" or "other": where this notebook runs (for the menu path to a GPU)."""
    env = os.environ if env is None else env
    if any(k.startswith("COLAB_") for k in env) or "google.colab" in sys.modules:
        return "colab"
    if env.get("KAGGLE_KERNEL_RUN_TYPE") or env.get("KAGGLE_URL_BASE"):
        return "kaggle"
    return "other"


def check_runtime(gpus: list[Gpu] | None = None, *, env: dict | None = None, out: Callable[[str], None] = print) -> list[Gpu]:
    """Cell 1: print the runtime's GPUs; stop with the menu path when there is none (unless COMPACT_LAB_ALLOW_CPU=1)."""
    env = os.environ if env is None else env
    gpus = find_gpus() if gpus is None else gpus
    for i, gpu in enumerate(gpus):
        out(f"GPU {i}: {describe(gpu)}")
    if gpus:
        return gpus
    where = place(env)
    message = (f"No GPU in this runtime. To get a free T4: {MENU[where]}. Everything also works on a CPU, only much slower: "
               f"set os.environ['{ALLOW_CPU_ENV}'] = '1' in a cell above to go on without a GPU.")
    if env.get(ALLOW_CPU_ENV) == "1":
        out(f"WARNING: {message.split('. To get')[0]} — going on with the CPU ({ALLOW_CPU_ENV}=1).")
        return gpus
    raise NotebookStop(message)


@dataclass(frozen=True)
class TorchPlan:
    keep: bool  # keep the runtime's torch (install requirements.txt without its torch line)
    version: str  # the runtime's torch version ("" when there is none)
    reason: str  # printed: what was kept or installed, and why


def runtime_torch(python: str = sys.executable) -> dict | None:
    """The runtime's torch, asked in a separate process (importing it here would pin this kernel to that build):
    {"version", "cuda", "available"}; None when torch is not installed."""
    code = ("import json, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
            "'available': torch.cuda.is_available()}))")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return None
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def driver_runs_cuda13(gpu: Gpu) -> bool:
    return _version_tuple(gpu.driver)[:2] >= CUDA13_DRIVER


def torch_plan(torch_info: dict | None, gpus: list[Gpu], pinned: str) -> TorchPlan:
    """Keep the runtime's torch or install the pinned one (see the module docstring); NotebookStop when neither works."""
    low, high = TORCH_RANGE
    if torch_info is not None:
        version = str(torch_info["version"])
        in_range = low <= _version_tuple(version)[:2] < high
        if in_range and (torch_info.get("available") or not gpus):
            what = f"CUDA {torch_info.get('cuda')}, it sees the GPU" if torch_info.get("available") else "no GPU to use"
            return TorchPlan(True, version, f"Kept the runtime's torch {version} ({what}): it is within the supported range "
                                            f"{'.'.join(map(str, low))} to below {'.'.join(map(str, high))}, so torch=={pinned} "
                                            "(a CUDA 13 build of about 2.7 GB from the registry) is not installed over it.")
        if in_range:
            raise NotebookStop(f"The runtime's torch {version} (CUDA {torch_info.get('cuda')}) cannot use the GPU ({describe(gpus[0])}). "
                               "Restart the runtime (Runtime → Restart session) and run the cells again; if it persists, pick a "
                               "fresh GPU runtime (Runtime → Disconnect and delete runtime).")
    else:
        version = ""
    if gpus and not driver_runs_cuda13(gpus[0]):
        found = f"the runtime's torch {version} is outside the supported range" if version else "this runtime has no torch"
        raise NotebookStop(f"Not installing torch=={pinned}: {found}, and the registry's build needs CUDA 13 (NVIDIA driver "
                           f"{CUDA13_DRIVER[0]}.{CUDA13_DRIVER[1]} or newer) while this GPU's driver is {gpus[0].driver}. Install a "
                           "torch built for this driver first, e.g. `pip install torch --index-url https://download.pytorch.org/whl/cu126`, "
                           "then run this cell again (that torch will be kept).")
    why = f"the runtime's torch {version} is outside the supported range" if version else "this runtime has no torch"
    return TorchPlan(False, version, f"Installing torch=={pinned} from the registry: {why}" +
                     (f", and the GPU's driver {gpus[0].driver} runs its CUDA 13 build." if gpus else " (CPU only)."))


def requirement_lines(requirements: Path) -> tuple[list[str], str]:
    """(requirements.txt's lines without torch, the pinned torch version)."""
    lines, pinned = [], ""
    for line in requirements.read_text(encoding="utf-8").splitlines():
        name = re.split(r"[=<>!~ \[;]", line.strip(), maxsplit=1)[0].lower()
        if name == "torch":
            pinned = line.split("==", 1)[1].split()[0] if "==" in line else ""
        else:
            lines.append(line)
    return lines, pinned


def install(requirements: str | Path = "requirements.txt", *, gpus: list[Gpu] | None = None, python: str = sys.executable,
            out: Callable[[str], None] = print, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> TorchPlan:
    """Cell 2: install requirements.txt, keeping the runtime's torch when it works (printed either way)."""
    requirements = Path(requirements)
    lines, pinned = requirement_lines(requirements)
    gpus = find_gpus() if gpus is None else gpus
    plan = torch_plan(runtime_torch(python), gpus, pinned)
    out(plan.reason)
    with tempfile.TemporaryDirectory() as tmp:
        reqs, constraints = Path(tmp) / "requirements.txt", Path(tmp) / "constraints.txt"
        reqs.write_text("\n".join(lines if plan.keep else [*lines, f"torch=={pinned}"]) + "\n", encoding="utf-8")
        # the kept torch is pinned for pip: a package asking for another torch fails the install instead of replacing it
        constraints.write_text(f"torch=={plan.version}\n" if plan.keep else "", encoding="utf-8")
        cmd = [python, "-m", "pip", "install", "-q", "-r", str(reqs), "-c", str(constraints), *shlex.split(os.environ.get(PIP_OPTIONS_ENV, ""))]
        proc = run(cmd, cwd=str(requirements.resolve().parent))
    if proc.returncode != 0:
        raise NotebookStop(f"pip install failed (exit code {proc.returncode}); its messages are above.")
    out("Installed the pinned requirements" + (f" (torch {plan.version} kept)." if plan.keep else f" with torch=={pinned}."))
    return plan


def open_proxy(port: int, out: Callable[[str], None] = print) -> None:
    """Open the app through Colab's port proxy (a link shown under the cell; works in this browser while the runtime runs).
    Elsewhere (Kaggle has no such proxy) say how the app can still be reached."""
    try:
        from google.colab import output  # only on Colab (or its stand-in in the tests)
    except ImportError:
        out(f"No port proxy here: the app listens on port {port} inside this runtime only. Check the runtime's internet "
            "access (Kaggle: Settings → Internet on) and run the cell again for a public link.")
        return
    output.serve_kernel_port_as_window(port, anchor_text="Open Compact LLM Lab (Colab proxy)")


def launch(args: Sequence[str] = ("--share",), *, port: int = 7860, python: str = sys.executable, cwd: str | Path = ".",
           out: Callable[[str], None] = print, proxy: Callable[[int], None] | None = None, share_wait_s: float = SHARE_WAIT_S) -> None:
    """Cell 3: run `python app.py ARGS --port PORT`, showing its output; open the Colab proxy when the share link
    fails; NotebookStop when the app exits with an error; stopping the cell (KeyboardInterrupt) stops the app."""
    proxy = proxy or (lambda p: open_proxy(p, out))
    cmd = [python, "-u", "app.py", *args, "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, bufsize=1)
    lines: queue.Queue[str | None] = queue.Queue()
    # a thread reads the app's output (a blocking read would miss a share link that never comes); None: the output ended
    threading.Thread(target=_pump, args=(proc, lines), name="app-output", daemon=True).start()
    local_at, shared, proxied = None, False, False
    try:
        while True:
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                line = ""
            if line is None:
                proc.wait()
                break
            if line:
                out(line)
                shared = shared or PUBLIC_URL in line
                local_at = local_at or (time.time() if LOCAL_URL in line else None)
                if SHARE_FAILED in line and not proxied:
                    proxied = _proxy(proxy, port, out)
            if local_at and not shared and not proxied and time.time() - local_at > share_wait_s and "--share" in args:
                proxied = _proxy(proxy, port, out)
    except KeyboardInterrupt:
        out("Stopping the app (the cell was stopped). Training runs started from it go on in the background.")
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        return
    if proc.returncode != 0:
        raise NotebookStop(f"The app stopped with exit code {proc.returncode}: the lines above say why.")


def _pump(proc: subprocess.Popen, lines: queue.Queue) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _proxy(proxy: Callable[[int], None], port: int, out: Callable[[str], None]) -> bool:
    out(f"The public share link could not be made: opening the app through Colab's own port proxy (port {port}) instead — "
        "use the link below; it works in this browser while this notebook runs." if place() == "colab" else
        "The public share link could not be made.")
    proxy(port)
    return True
