"""What the Fine-tune panel's run buttons do: stop, resume, retry after an out-of-memory, delete, download, merge
and push a run, each refused with a message when no run is picked or when this browser may not control the run; each returns
what the page shows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EngineError, JobError
from ..runs import run_path

if TYPE_CHECKING:
    from ..training.jobs import JobManager


def _require(name: str | None, message: str) -> str:
    if not name:
        raise JobError(message)
    return name


def stop_run(jobs: JobManager, name: str | None, owner: str | None) -> str:
    """Ask the run to stop (it saves a checkpoint first); the message to show."""
    name = _require(name, "No run selected.")
    jobs.check_control(name, owner, "stop")
    jobs.stop(name, wait=False)
    return f"Asked '{name}' to stop: it saves a checkpoint at the next step, then exits (Resume continues it)."


def resume_run(jobs: JobManager, name: str | None, owner: str | None) -> str:
    """Resume the run from its last complete checkpoint; the message to show."""
    name = _require(name, "Pick a run to resume.")
    jobs.check_control(name, owner, "resume")
    jobs.resume(name)
    return f"Resuming '{name}' from its last complete checkpoint."


def retry_run(jobs: JobManager, name: str | None, owner: str | None) -> tuple[str, str]:
    """Start a copy of the run with half the micro batch and twice the accumulation: (the new run's name, the message)."""
    name = _require(name, "Pick the run that ran out of memory.")
    jobs.check_control(name, owner, "retry")
    new = jobs.retry_smaller_batch(name, owner=owner)
    return new, f"Started '{new}' with half the micro batch and twice the accumulation (same effective batch)."


def delete_run(jobs: JobManager, name: str | None, owner: str | None) -> None:
    """Delete the run's folder."""
    name = _require(name, "Pick a run to delete.")
    jobs.check_control(name, owner, "delete")
    jobs.delete(name)


def zip_for_download(jobs: JobManager, name: str | None) -> Path:
    """The run's folder as a zip file in the exports folder."""
    from ..export.merge import zip_run

    return zip_run(run_path(jobs.runs_dir, _require(name, "Pick a run to download.")))


def merge_finished_run(jobs: JobManager, name: str | None) -> str:
    """Merge a finished run's adapter into its base (16-bit safetensors); the message to show."""
    from ..export.merge import merge_adapter

    name = _require(name, "Pick a finished LoRA/QLoRA run to merge.")
    if jobs.status(name).state != "finished":
        raise JobError(f"Run '{name}' has not finished; merge needs its final adapter.")
    out = merge_adapter(run_path(jobs.runs_dir, name), runs_dir=jobs.runs_dir)
    return f"Merged model saved in {out} (base reloaded unquantized, adapter merged, safetensors)."


def push_finished_run(jobs: JobManager, name: str | None, repo: str, what: str, private: bool, token: str) -> str:
    """Push the run's adapter, merged or full model with a model card to the Hub, with this token only (never the
    server's HF_TOKEN); the message to show."""
    from ..export.hub import push_run

    name = _require(name, "Pick a finished run to push.")
    url = push_run(run_path(jobs.runs_dir, name), repo, what=what, token=token, private=bool(private), use_env_token=False, runs_dir=jobs.runs_dir)
    return f"✅ Pushed the {what} of **{name}** with a model card to [{url}]({url})"


def push_default(jobs: JobManager, name: str | None) -> str | None:
    """What to push by default for the picked run: 'model' for a full/scratch run (it has no adapter), else 'adapter';
    None when the run cannot be read."""
    try:
        return "model" if name and jobs.status(name).output == "model" else "adapter"
    except EngineError:
        return None
