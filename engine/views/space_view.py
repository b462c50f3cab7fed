"""The page's words about where it runs: a Space's demo notice (limits, storage, the duplicate link) and a queued run's
place in the waiting line, in the visitor's language. The rules themselves live in engine/space.py (limits, storage,
duplicate link) and engine/training/queue.py (the line and its expected wait); this module only writes them for people.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import space
from ..i18n import t
from .run_log import fmt_duration

DOWNLOAD_PATH = ("finetune.tab", "finetune.export.title", "finetune.export.zip")  # the labels on the way to a run's zip

if TYPE_CHECKING:
    from ..runs import RunSummary
    from ..training.jobs import JobManager


def space_notice_md(runs_dir: Path, lang: str = "en") -> str:
    """The Space's notice for the top of the page: the per-run limits, where runs are kept (or that they disappear at a
    restart) and the "Duplicate this Space" link; empty outside demo mode."""
    if not space.demo_mode():
        return ""
    # the way to a run's zip in the page's own words (its tab, accordion and button), so the notice never names another
    path = " → ".join(t(key, lang) for key in DOWNLOAD_PATH)
    lines = [t("space.notice", lang, **space.limits_params()), t(space.storage_notice_key(runs_dir), lang, path=path)]
    if url := space.duplicate_url():
        lines.append(t("space.duplicate", lang, url=url))
    return "\n\n".join(lines)


def hardware_word(device_kind: str, lang: str = "en") -> str:
    """CPU / GPU (the device the running run reported), or "machine" when it has not said yet."""
    return t(f"space.hardware.{device_kind}" if device_kind in ("cpu", "cuda") else "space.hardware.machine", lang)


def queue_md(s: RunSummary, lang: str = "en", running_device: str = "") -> str:
    """A queued run's place in the line and its expected wait; empty for a run that is not queued."""
    if s.state != "queued" or s.queue_position is None:
        return ""
    hardware = hardware_word(running_device, lang)
    if s.queue_wait_s is None:
        wait = t("space.queue.wait_unknown", lang, running=s.queue_behind or "?", hardware=hardware)
    elif s.queue_behind:
        wait = t("space.queue.wait", lang, wait=fmt_duration(s.queue_wait_s), running=s.queue_behind, hardware=hardware)
    else:
        wait = t("space.queue.wait_next", lang, wait=fmt_duration(s.queue_wait_s))
    return t("space.queue.position", lang, position=s.queue_position, wait=wait)


def started_md(jobs: JobManager, name: str, lang: str = "en") -> str:
    """The message after Start: the run started, or it waits in line (its number)."""
    s = jobs.status(name)
    if s.state == "queued" and s.queue_position is not None:
        return t("space.queue.started", lang, name=name, position=s.queue_position)
    return t("finetune.msg.started", lang, name=name)
