"""Uploaded files kept in the runs directory, so that a run that reads one can still be resumed after gradio has
cleaned its temp dir."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


def keep_upload(path: str, upload_dir: Path) -> Path:
    """Copy an upload out of gradio's temp dir (cleaned on exit) so the run can be resumed later.

    Named by a hash of the content, so the same file uploaded twice is kept once."""
    src = Path(path)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    dest = upload_dir / f"{digest}-{src.name}"
    if not dest.exists():
        shutil.copyfile(src, dest)
    return dest
