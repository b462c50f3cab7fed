"""What the Fine-tune panel's run buttons do: stop, resume, retry after an out-of-memory, delete, download, merge
and push a run, each refused with a message when no run is picked or when this browser may not control the run
(engine/training/jobs.py `check_control`: on a shared app only the session that started a run); each returns what the
page shows, in the visitor's language (`lang`; refusals are engine errors with a language key)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EngineError, JobError, for_people
from ..i18n import fmt_number, t
from ..runs import MIX_FILE, run_path
from .uploads import export_path

if TYPE_CHECKING:
    from ..training.jobs import JobManager


def _require(name: str | None, key: str) -> str:
    if not name:
        raise JobError(key=f"finetune.control.{key}")
    return name


def stop_run(jobs: JobManager, name: str | None, owner: str | None, lang: str = "en") -> str:
    """Ask the run to stop (it saves a checkpoint first) and, in the background, kill its process tree if it has not
    exited `jobs.stop_grace_s` seconds later (a run hung in a download, tokenizing or saving); the message to show."""
    name = _require(name, "no_run")
    jobs.check_control(name, owner, "stop")
    queued = jobs.status(name).state == "queued"
    jobs.stop(name, wait=False)
    if queued:  # it leaves the waiting line before it started: no process to wait for, nothing trained, nothing saved
        return t("waiting_line.left", lang, name=name)
    threading.Thread(target=stop_or_kill, args=(jobs, name), name=f"stop-{name}", daemon=True).start()
    return t("finetune.control.stopping", lang, name=name)


def stop_or_kill(jobs: JobManager, name: str) -> str:
    """Wait for a run asked to stop; kill its process tree after the grace period and record it as stopped (resumable
    from its last complete checkpoint). Returns the run's state afterwards."""
    import time

    from ..runs import EventLog, last_complete_checkpoint

    summary = jobs.stop(name, wait=True)  # kills the process group if it is still alive after the grace period
    for _ in range(100):  # SIGKILL is delivered asynchronously: wait until the process is gone
        if summary.state != "running":
            break
        time.sleep(0.1)
        summary = jobs.status(name)
    if summary.state in ("killed", "created"):  # killed (before its first event, if "created"): record the stop
        last = last_complete_checkpoint(summary.path)
        EventLog(summary.path / "events.jsonl").write("stopped", step=summary.step, checkpoint=last.name if last else None,
                                                      message=f"killed {jobs.stop_grace_s:g} s after Stop (it did not exit by itself)")
        summary = jobs.status(name)
    return summary.state


def resume_run(jobs: JobManager, name: str | None, owner: str | None, lang: str = "en") -> str:
    """Resume the run from its last complete checkpoint (or, with none, start it again with its settings); the message
    to show says which."""
    name = _require(name, "pick_resume")
    jobs.check_control(name, owner, "resume")
    if (run_path(jobs.runs_dir, name) / MIX_FILE).exists():  # a mix of adapters is mixed again, never "resumed" as a training run
        raise JobError(key="mix.no_resume", name=name)
    from_checkpoint = jobs.status(name).resumable  # read before the relaunch writes its first events
    jobs.resume(name)
    return t("finetune.control.resuming" if from_checkpoint else "run_restart.resuming", lang, name=name)


def auto_resume(jobs: JobManager) -> str | None:
    """`python app.py --auto-resume`: resume the newest interrupted run (engine/views/run_view.py `interrupted_run`) when
    the app starts; the message to print, None when there is nothing to resume. The person starting the app owns the
    machine, so no browser key is checked."""
    from .run_view import interrupted_run

    s = interrupted_run(jobs)
    if s is None:
        return None
    jobs.resume(s.name)
    return f"Resuming interrupted run '{s.name}' from its last complete checkpoint (--auto-resume)."


def retry_run(jobs: JobManager, name: str | None, owner: str | None, lang: str = "en") -> tuple[str, str]:
    """Start a copy of the run with half the micro batch and twice the accumulation: (the new run's name, the message)."""
    name = _require(name, "pick_retry")
    jobs.check_control(name, owner, "retry")
    new = jobs.retry_smaller_batch(name, owner=owner)
    return new, t("finetune.control.retrying", lang, name=new)


def delete_run(jobs: JobManager, name: str | None, owner: str | None) -> None:
    """Delete the run's folder."""
    name = _require(name, "pick_delete")
    jobs.check_control(name, owner, "delete")
    jobs.delete(name)


def zip_for_download(jobs: JobManager, name: str | None, owner: str | None = None) -> Path:
    """The run's folder as a zip file under an unguessable name in the private exports folder (views/uploads.py)."""
    from ..export.merge import zip_run

    name = _require(name, "pick_download")
    jobs.check_control(name, owner, "download")
    jobs.status(name)  # a message for a run that does not exist
    return zip_run(run_path(jobs.runs_dir, name), out_path=export_path(name, ".zip"))


def merge_finished_run(jobs: JobManager, name: str | None, owner: str | None = None, lang: str = "en") -> str:
    """Start merging a finished run's adapter into its base (16-bit safetensors) in a subprocess, on the CPU when the
    estimator says the GPU cannot hold the unquantized base; refused while a training run or another merge is going,
    and (shared mode) for anyone but the run's owner. The message to show (the page follows the merge with
    `merge_status_md`)."""
    from ..export.merge import merge_plan
    from ..hardware.coexist import cuda_free_gib
    from ..hardware.device import detect_device

    name = _require(name, "pick_merge")
    jobs.check_control(name, owner, "merge")
    s = jobs.status(name)
    if s.state != "finished":
        raise JobError(key="finetune.control.merge_unfinished", name=name)
    if s.output != "adapter":
        raise JobError(key="finetune.control.merge_full", name=name)
    plan = merge_plan(s.path, jobs.runs_dir, detect_device(), cuda_free_gib())
    jobs.start_merge(name, device=plan.device)
    return t("finetune.control.merging", lang, name=name, reason=for_people(plan.reason, lang))


def push_finished_run(jobs: JobManager, name: str | None, repo: str, what: str, private: bool, token: str, gguf: str | None = None,
                      owner: str | None = None, lang: str = "en") -> str:
    """Push the run's adapter, merged or full model with a model card to the Hub, with this token only (never the
    server's HF_TOKEN), and a GGUF of it when `gguf` names a type ("none" or empty: no GGUF); the message to show."""
    from ..export.hub import push_run
    from .playground_defaults import start_for

    name = _require(name, "pick_push")
    jobs.check_control(name, owner, "push")
    gguf = None if gguf in (None, "", "none") else gguf
    # the GGUF's Modelfile decodes as the Playground does for this run (greedy `precise` for a task), as the Export button's does
    preset = start_for(jobs.runs_dir, f"run:{name}", lang).preset if gguf else None
    url = push_run(run_path(jobs.runs_dir, name), repo, what=what, token=token, private=bool(private), use_env_token=False, runs_dir=jobs.runs_dir,
                   gguf=gguf, gguf_preset=preset)
    key = "finetune.control.pushed_gguf" if gguf else "finetune.control.pushed"
    return "✔ " + t(key, lang, what=t(f"finetune.push.what.{what}", lang), name=name, gguf=gguf or "", url=url)


def push_default(jobs: JobManager, name: str | None) -> str | None:
    """What to push by default for the picked run: 'model' for a full/scratch run (it has no adapter), else 'adapter';
    None when the run cannot be read."""
    try:
        return "model" if name and jobs.status(name).output == "model" else "adapter"
    except EngineError:
        return None


def gguf_note(jobs: JobManager, name: str | None, lang: str = "en") -> str:
    """What the Export GGUF button will do for the picked run, or why it cannot (shown before the click)."""
    from ..export.gguf_run import gguf_check

    if not name:
        return ""
    reason = gguf_check(name, jobs.runs_dir)
    if reason:
        return t("finetune.control.gguf_unavailable", lang, name=name, reason=for_people(reason, lang))
    merged = (jobs.runs_dir / name / "adapter").exists() and not (jobs.runs_dir / name / "merged" / "config.json").exists()
    return t("finetune.control.gguf_merge_first" if merged else "finetune.control.gguf_ready", lang, name=name)


def export_gguf_for_download(jobs: JobManager, name: str | None, gguf_type: str, preset: str | None = None,
                             owner: str | None = None, lang: str = "en") -> tuple[Path, str]:
    """Export the picked finished run to GGUF with its Ollama Modelfile; (the zip to download, under an unguessable name
    in the private exports folder, the message to show). Shared mode: the run's owner only, like a zip of the run.
    preset: the Modelfile's decoding; by default the one the Playground uses for this run (greedy `precise` for the
    date task, whose one right answer sampling would only spoil; `balanced` for chat)."""
    from ..config import GgufSettings
    from ..export.gguf_run import export_ref_gguf, zip_export
    from .playground_defaults import start_for

    name = _require(name, "pick_gguf")
    jobs.check_control(name, owner, "export")
    preset = preset or start_for(jobs.runs_dir, f"run:{name}", lang).preset
    result = export_ref_gguf(name, jobs.runs_dir, GgufSettings(type=gguf_type, preset=preset))
    key = "finetune.control.gguf_done" if result.template_checked else "finetune.control.gguf_done_no_template"
    message = t(key, lang, type=result.type, arch=result.arch, mib=fmt_number(round(result.bytes / 2**20, 1), lang, 1),
                took=fmt_number(round(result.seconds, 1), lang, 1), model=name.lower())
    return zip_export(result.folder, out_path=export_path(f"{result.folder.name}", ".zip")), message
