"""Files a session hands in (uploads) and gets back (exports), kept apart per session and never under a guessable name.

Uploads are copied out of gradio's temp dir (cleaned on exit) into the runs directory, so that a run that reads one
can still be resumed later. Each browser session gets its own folder `_uploads/<session>/` (a hash of gradio's
session id), and a form may only name files in its own session's folder (engine/estimator/handoff.py), so one visitor
can never preview or train on another's data. A file is checked (type, size) before it is copied, copied under a
random name, and removed when its session ends or after a day, unless a run's config names it.

Exports (run zips, batch CSVs, ONNX files) are written under random names to a private temp folder, itself made
under a random name by `tempfile.mkdtemp` once per process (a predictable name in a shared /tmp could be made first,
or linked elsewhere, by another user of the machine); gradio copies a file a handler returns into its own cache and
serves it from there, so nothing of the runs directory needs to be reachable over HTTP (no `allowed_paths`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import DataError

DAY_S = 24 * 3600
# A per-process key: an upload's name is a keyed hash of its content, so the same file handed in again by the same
# session is kept once (the form re-reads it on every change), yet no name can be guessed from the content.
_NAME_KEY = secrets.token_bytes(16)
MAX_UPLOAD_BYTES = 200 * 1024 * 1024  # the same limit as engine/data/files.py MAX_FILE_BYTES (app.py passes it to launch())


def session_dir(upload_dir: Path, session: str | None) -> Path:
    """The upload folder of one session (a hash of its id: the folder name gives nothing away)."""
    digest = hashlib.sha256((session or "local").encode("utf-8")).hexdigest()[:16]
    return Path(upload_dir) / digest


def keep_upload(path: str, upload_dir: Path, *, suffixes: Iterable[str] | None = None, max_bytes: int = MAX_UPLOAD_BYTES) -> Path:
    """Check an upload (type, size) and copy it out of gradio's temp dir under an unguessable name in `upload_dir` (a
    session's folder, see `session_dir`): a keyed hash of its content, so the same file is kept once. DataError naming
    the problem before anything is copied."""
    src = Path(path)
    allowed = [s.lower() for s in suffixes] if suffixes else None
    if allowed is not None and src.suffix.lower() not in allowed:
        raise DataError(key="message.uploads.file_type", file=src.name, suffix=repr(src.suffix) if src.suffix else "—", allowed=", ".join(allowed))
    try:
        size = src.stat().st_size
    except OSError:
        raise DataError(key="message.uploads.gone", file=src.name) from None
    if size > max_bytes:
        raise DataError(key="message.uploads.too_big", file=src.name, mb=f"{size / 2**20:.0f}", limit=max_bytes // 2**20)
    upload_dir = Path(upload_dir)
    upload_dir.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in src.name)[-80:] or "upload"
    mac = hmac.new(_NAME_KEY, str(upload_dir).encode("utf-8"), hashlib.sha256)
    with open(src, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            mac.update(chunk)
    dest = upload_dir / f"{mac.hexdigest()[:20]}-{safe}"  # the prefix is hidden in messages (refs.shown_file_name)
    if not dest.exists():
        shutil.copyfile(src, dest)
    return dest


def referenced_uploads(runs_dir: Path) -> set[str]:
    """Names of the upload files that some run's config.yaml names (kept: a stopped run may be resumed)."""
    names: set[str] = set()
    for config in Path(runs_dir).glob("*/config.yaml"):
        try:
            text = config.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        names.update(part.rsplit("/", 1)[-1].strip(" '\"") for part in text.split() if "_uploads" in part)
    return names


def sweep_uploads(upload_dir: Path, runs_dir: Path, *, session: str | None = None, max_age_s: float = DAY_S) -> int:
    """Remove uploads no run names: every one of `session` (its session ended), and any older than `max_age_s`.
    Returns how many files were removed.

    A folder goes only when it is the ended session's own, or when it has been empty for longer than `max_age_s`: never
    a live session's folder, which may have just been made for an upload still being copied into it (`keep_upload`), so
    that one visitor closing a tab can never sweep another's upload away."""
    upload_dir = Path(upload_dir)
    if not upload_dir.is_dir():
        return 0
    keep, now, removed = referenced_uploads(runs_dir), time.time(), 0
    ended = session_dir(upload_dir, session) if session is not None else None
    for folder in [p for p in upload_dir.iterdir() if p.is_dir()]:
        try:
            files = list(folder.iterdir())
        except OSError:  # removed meanwhile (by its own session's end)
            continue
        for f in files:
            try:
                old = now - f.stat().st_mtime > max_age_s
            except OSError:
                continue
            if f.is_file() and f.name not in keep and (old or folder == ended):
                f.unlink(missing_ok=True)
                removed += 1
        try:
            stale = now - folder.stat().st_mtime > max_age_s  # empty for that long: no session is filling it
            if folder != upload_dir and (folder == ended or stale) and not any(folder.iterdir()):
                folder.rmdir()
        except OSError:  # gone, or filled meanwhile: kept
            continue
    return removed


EXPORTS_PREFIX = "compact-lab-exports-"


@functools.cache
def _process_exports_dir() -> Path:
    # made once per process (cached, not a mutated global): mkdtemp picks an unpredictable name, creates it with mode 0700
    # and fails rather than reuse something already there
    return Path(tempfile.mkdtemp(prefix=EXPORTS_PREFIX))


def _same_owner(path: Path, root: Path) -> bool:
    try:
        return path.stat().st_uid == root.stat().st_uid
    except OSError:
        return False


def exports_root() -> Path:
    """The private folder exports are written to before gradio copies them into its cache (made by `mkdtemp` under an
    unpredictable name, only this user can read it); files older than a day are removed when a new export is made, and
    so are the folders of earlier processes once they are a day old."""
    root = _process_exports_dir()
    root.mkdir(mode=0o700, exist_ok=True)  # back if something emptied the temp folder meanwhile
    now = time.time()
    for old in [*root.iterdir(), *(p for p in root.parent.glob(EXPORTS_PREFIX + "*") if p != root and _same_owner(p, root))]:
        try:
            if now - old.stat().st_mtime > DAY_S:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        except OSError:
            continue
    return root


def export_path(stem: str, suffix: str = "") -> Path:
    """A fresh, unguessable path for an export: `<exports root>/<random>/<stem><suffix>` (a folder when suffix is '')."""
    folder = exports_root() / secrets.token_urlsafe(16)
    folder.mkdir(mode=0o700)
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in stem)[:80] or "export"
    return folder / f"{safe}{suffix}"
