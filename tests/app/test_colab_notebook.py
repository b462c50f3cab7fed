"""colab_launch.ipynb executed for real (nbclient, a Jupyter kernel) against a stand-in `google.colab` module, as a
student runs it: the GPU check stops a GPU-less runtime with the menu path; the install step (pointed at this
environment: nothing to download, offline) keeps the runtime's torch; the launch cell prints the login, resumes the
run a disconnect interrupted in the Drive folder, falls back to Colab's port proxy when the share link cannot be made
(offline here), and fails visibly when the app crashes.

The stand-in: `google.colab.drive.mount(path)` makes the Drive folder; `google.colab.output.serve_kernel_port_as_window`
records its port and then stops the cell, as the student does once the app is open (the launcher stops the app)."""

from __future__ import annotations

import os
import socket
import textwrap
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from nbclient.exceptions import CellExecutionError  # noqa: E402

from engine.config import TrainConfig  # noqa: E402
from engine.runs import last_complete_checkpoint, read_events  # noqa: E402
from engine.training.jobs import JobManager  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STANDIN = {
    "google/colab/__init__.py": '"""Stand-in for Colab\'s module (tests/app/test_colab_notebook.py)."""\n',
    "google/colab/drive.py": """
        import os
        def mount(path, **kwargs):
            os.makedirs(os.path.join(path, "MyDrive"), exist_ok=True)
            print(f"Mounted at {path}")
    """,
    "google/colab/output.py": """
        import os, signal
        def serve_kernel_port_as_window(port, anchor_text=None):
            with open(os.environ["STANDIN_PROXY_LOG"], "a") as fh:
                fh.write(f"{port}\\n")
            os.kill(os.getpid(), signal.SIGINT)  # the student has the app open, and later stops the cell
    """,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def colab(tmp_path, monkeypatch):
    for rel, text in STANDIN.items():
        path = tmp_path / "standin" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "standin") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("COLAB_RELEASE_TAG", "standin")  # what a Colab runtime sets
    monkeypatch.setenv("STANDIN_PROXY_LOG", str(tmp_path / "proxy.log"))
    monkeypatch.setenv("COMPACT_LAB_PIP_OPTIONS", "--no-index")  # the install step: this environment, nothing downloaded
    for name in ("COMPACT_LAB_RUNS", "COMPACT_LAB_SHARED", "COMPACT_LAB_AUTH", "COMPACT_LAB_ALLOW_CPU", "SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()))
    return tmp_path


def _run(tmp_path: Path, port: int) -> tuple[str, Exception | None]:
    """Execute the notebook (its Drive folder and port pointed at the test's); returns its text output and the error."""
    nb = nbformat.read(ROOT / "colab_launch.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = cell.source.replace('DRIVE = "/content/drive"', f'DRIVE = {str(tmp_path / "drive")!r}').replace(
            "PORT = 7860", f"PORT = {port}")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    error = None
    try:
        client.execute()
    except CellExecutionError as exc:
        error = exc
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", "") if out.get("output_type") == "stream" else "\n".join(out.get("traceback", [])) + str(out.get("data", "")))
    return "\n".join(text), error


def test_without_a_gpu_the_first_cell_stops_with_the_menu_path(colab):
    text, error = _run(colab, _free_port())
    assert error is not None and "NotebookStop" in str(error)
    assert "No GPU in this runtime" in text and "Runtime → Change runtime type → T4 GPU" in text


def _interrupted_run(runs: Path) -> str:
    """A run on the Drive folder killed (kill -9, like a disconnect) after its first checkpoint."""
    jobs = JobManager(runs)
    name = jobs.start(TrainConfig(method="lora", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=400, save_steps=2,
                                  micro_batch_size=4, max_seq_len=64, logging_steps=1, eval_fraction=0.0, run_name="before-disconnect"))
    deadline = time.time() + 240
    while time.time() < deadline and last_complete_checkpoint(runs / name) is None:
        time.sleep(0.3)
    assert last_complete_checkpoint(runs / name) is not None, (runs / name / "train.log").read_text()[-2000:]
    jobs.kill(name)
    assert jobs.status(name).state == "killed"
    return name


@pytest.mark.slow
def test_the_notebook_logs_in_resumes_from_drive_and_falls_back_to_the_proxy(colab, monkeypatch):
    monkeypatch.setenv("COMPACT_LAB_ALLOW_CPU", "1")  # a CPU runtime, on purpose: the check warns and goes on
    runs = colab / "drive" / "MyDrive" / "compact-llm-lab" / "runs"
    name = _interrupted_run(runs)
    checkpoint = last_complete_checkpoint(runs / name).name
    port = _free_port()
    try:
        text, error = _run(colab, port)
        assert error is None, text[-4000:]
        assert "WARNING: No GPU in this runtime" in text
        import torch

        assert f"Kept the runtime's torch {torch.__version__}" in text and f"torch {torch.__version__} kept" in text
        assert "Login is on for this public link: user 'lab', password " in text
        assert f"Resuming interrupted run '{name}'" in text
        assert "Could not create share link" in text or "Running on local URL" in text
        assert "opening the app through Colab's own port proxy" in text
        assert (colab / "proxy.log").read_text().split() == [str(port)]
        assert "Stopping the app" in text  # the cell stopped (by the stand-in, as a student would), and the app with it
        deadline = time.time() + 120  # the resumed run is a training process of its own: it goes on after the app
        while time.time() < deadline and not any(e.get("resumed_from") for e in read_events(runs / name) if e["type"] == "start"):
            time.sleep(0.5)
        starts = [e for e in read_events(runs / name) if e["type"] == "start"]
        assert starts[-1]["resumed_from"] == checkpoint
    finally:
        jobs = JobManager(runs)
        if jobs.active():
            jobs.kill(jobs.active())


def test_a_crashing_app_fails_its_cell(colab, monkeypatch):
    monkeypatch.setenv("COMPACT_LAB_ALLOW_CPU", "1")
    monkeypatch.setenv("COMPACT_LAB_AUTH", "no-colon-here")  # the app refuses it at start and exits with an error
    text, error = _run(colab, _free_port())
    assert error is not None and "The app stopped with exit code 1" in str(error)
    assert "must be USER:PASSWORD" in text
    assert not (colab / "proxy.log").exists()
