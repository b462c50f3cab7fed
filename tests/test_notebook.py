"""The hosted-notebook steps (engine/notebook.py) on their own: the GPU check and its menu path, the torch decision for
every kind of runtime, the install command (never a torch line when the runtime's torch is kept, and a constraint that
stops pip from replacing it), the start-up device lines, and the launcher (output shown, the proxy on a failed share
link, a crash raising, a stopped cell stopping the app). tests/app/test_colab_notebook.py runs the notebook itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from engine import notebook
from engine.hardware.device import DeviceInfo
from engine.hardware.nvidia import Gpu, parse_nvidia_smi
from engine.hardware.startup import device_lines

ROOT = Path(__file__).resolve().parent.parent
T4_OLD_DRIVER = Gpu("Tesla T4", 15360, "550.54.15", "12.4")
T4_NEW_DRIVER = Gpu("Tesla T4", 15360, "580.82.07", "13.0")


def test_nvidia_smi_output_is_read():
    banner = "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |"
    assert parse_nvidia_smi("Tesla T4, 15360, 550.54.15\nTesla T4, 15360, 550.54.15\n", banner) == [T4_OLD_DRIVER, T4_OLD_DRIVER]
    assert parse_nvidia_smi("", "") == []


def test_no_gpu_stops_with_the_menu_path_of_the_place():
    lines = []
    with pytest.raises(notebook.NotebookStop) as err:
        notebook.check_runtime([], env={"COLAB_RELEASE_TAG": "x"}, out=lines.append)
    assert "Runtime → Change runtime type → T4 GPU" in str(err.value)
    with pytest.raises(notebook.NotebookStop, match="Settings → Accelerator → GPU T4 x2"):
        notebook.check_runtime([], env={"KAGGLE_KERNEL_RUN_TYPE": "Interactive"})
    notebook.check_runtime([], env={notebook.ALLOW_CPU_ENV: "1"}, out=lines.append)  # the owner's choice: go on, warned
    assert lines and lines[-1].startswith("WARNING: No GPU")
    lines.clear()
    assert notebook.check_runtime([T4_OLD_DRIVER], env={}, out=lines.append) == [T4_OLD_DRIVER]
    assert lines == ["GPU 0: Tesla T4, 15.0 GiB, driver 550.54.15, CUDA 12.4"]


def test_a_working_runtime_torch_is_kept_and_said_so():
    plan = notebook.torch_plan({"version": "2.8.0+cu126", "cuda": "12.6", "available": True}, [T4_OLD_DRIVER], "2.13.0")
    assert plan.keep and plan.version == "2.8.0+cu126" and "Kept the runtime's torch 2.8.0+cu126" in plan.reason and "2.7 GB" in plan.reason


def test_a_torch_that_cannot_see_the_gpu_or_is_too_old_for_the_driver_stops():
    with pytest.raises(notebook.NotebookStop, match="cannot use the GPU"):
        notebook.torch_plan({"version": "2.13.0", "cuda": "13.0", "available": False}, [T4_OLD_DRIVER], "2.13.0")
    # too old for transformers 5.23, and the registry's CUDA 13 build would not run on this driver: what to install
    with pytest.raises(notebook.NotebookStop) as err:
        notebook.torch_plan({"version": "2.4.1+cu121", "cuda": "12.1", "available": True}, [T4_OLD_DRIVER], "2.13.0")
    assert "driver is 550.54.15" in str(err.value) and "download.pytorch.org/whl/cu126" in str(err.value)


def test_the_pinned_torch_is_installed_only_where_it_can_run():
    plan = notebook.torch_plan(None, [T4_NEW_DRIVER], "2.13.0")  # no torch, a driver that runs CUDA 13
    assert not plan.keep and "Installing torch==2.13.0" in plan.reason
    assert not notebook.torch_plan(None, [], "2.13.0").keep  # a CPU runtime without torch
    assert notebook.torch_plan({"version": "2.13.0+cpu", "cuda": None, "available": False}, [], "2.13.0").keep  # CPU, in range


def test_install_leaves_torch_out_and_pins_the_kept_one(tmp_path, monkeypatch):
    seen = {}

    def fake_pip(cmd, cwd):
        reqs, constraints = Path(cmd[cmd.index("-r") + 1]), Path(cmd[cmd.index("-c") + 1])
        seen.update(cmd=cmd, reqs=reqs.read_text(), constraints=constraints.read_text())
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(notebook, "runtime_torch", lambda python: {"version": "2.8.0+cu126", "cuda": "12.6", "available": True})
    monkeypatch.setenv(notebook.PIP_OPTIONS_ENV, "--no-index --quiet")
    lines = []
    plan = notebook.install(ROOT / "requirements.txt", gpus=[T4_OLD_DRIVER], out=lines.append, run=fake_pip)
    assert plan.keep and "torch==" not in seen["reqs"] and "transformers==5.23.0" in seen["reqs"]
    assert seen["constraints"] == "torch==2.8.0+cu126\n" and seen["cmd"][-2:] == ["--no-index", "--quiet"]
    assert lines[0].startswith("Kept the runtime's torch") and "torch 2.8.0+cu126 kept" in lines[-1]
    with pytest.raises(notebook.NotebookStop, match="pip install failed"):
        notebook.install(ROOT / "requirements.txt", gpus=[T4_OLD_DRIVER], out=lines.append,
                         run=lambda cmd, cwd: subprocess.CompletedProcess(cmd, 1))


def test_the_app_says_its_device_and_warns_loudly_about_an_unused_gpu():
    cpu = DeviceInfo(kind="cpu", name="AMD EPYC", total_gib=24.0, bf16=True)
    assert device_lines(cpu, [], lang="en") == [device_lines(cpu, [], lang="en")[0]] and "no GPU" in device_lines(cpu, [], lang="en")[0]
    lines = device_lines(cpu, [T4_OLD_DRIVER], lang="en", torch_build=lambda: ("2.13.0", "13.0"))
    assert lines[1].startswith("WARNING — A GPU IS HERE BUT TORCH CANNOT USE IT: Tesla T4") and "torch 2.13.0, CUDA 13.0" in lines[1]
    assert "NÃO CONSEGUE" in device_lines(cpu, [T4_OLD_DRIVER], lang="pt-BR", torch_build=lambda: ("2.13.0+cpu", None))[1]
    t4 = DeviceInfo(kind="cuda", name="Tesla T4", total_gib=14.7, bf16=False, capability=(7, 5))
    assert device_lines(t4, [T4_OLD_DRIVER], lang="en") == ["Device: GPU Tesla T4 (14.7 GiB): training and generation run on it."]


def _fake_app(tmp_path: Path, body: str) -> Path:
    (tmp_path / "app.py").write_text(textwrap.dedent(body))
    return tmp_path


def test_launch_shows_the_output_and_opens_the_proxy_when_the_share_link_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "x")  # on Colab
    cwd = _fake_app(tmp_path, """
        import sys
        print("Login is on for this public link: user 'lab', password abc", flush=True)
        print("* Running on local URL:  http://127.0.0.1:" + sys.argv[-1], flush=True)
        print("\\nCould not create share link. Please check your internet connection.", flush=True)
    """)
    lines, proxied = [], []
    notebook.launch(["--share"], port=7999, cwd=cwd, out=lines.append, proxy=proxied.append)
    assert proxied == [7999] and any("user 'lab'" in line for line in lines)
    assert sum("Colab's own port proxy" in line for line in lines) == 1


def test_launch_opens_the_proxy_when_the_share_link_never_comes(tmp_path):
    cwd = _fake_app(tmp_path, """
        import sys, time
        print("* Running on local URL:  http://127.0.0.1:" + sys.argv[-1], flush=True)
        time.sleep(1.5)
    """)
    proxied = []
    notebook.launch(["--share"], port=7998, cwd=cwd, out=lambda line: None, proxy=proxied.append, share_wait_s=0.5)
    assert proxied == [7998]


def test_a_crashing_app_fails_the_cell(tmp_path):
    cwd = _fake_app(tmp_path, """
        import sys
        print("Traceback: something broke", flush=True)
        sys.exit(3)
    """)
    lines = []
    with pytest.raises(notebook.NotebookStop, match="exit code 3"):
        notebook.launch(["--share"], cwd=cwd, out=lines.append, proxy=lambda port: None)
    assert "Traceback: something broke" in lines


def test_stopping_the_cell_stops_the_app(tmp_path):
    cwd = _fake_app(tmp_path, """
        import sys, time
        print("* Running on public URL: https://x.gradio.live", flush=True)
        time.sleep(600)
    """)
    lines = []
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))  # what the notebook's Stop button sends
    timer.start()
    notebook.launch(["--share"], cwd=cwd, out=lines.append, proxy=lambda port: pytest.fail("the share link worked"))
    assert lines[-1].startswith("Stopping the app") and sys.exc_info() == (None, None, None)
