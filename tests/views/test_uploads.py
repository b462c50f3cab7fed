"""Uploads kept in the runs directory: checked before copying, random names, one folder per session, swept when
their session ends or after a day unless a run names them; exports under unguessable names."""

from __future__ import annotations

import os
import time

import pytest

from engine.errors import DataError
from engine.views.uploads import export_path, keep_upload, session_dir, sweep_uploads


def test_upload_is_copied_under_a_random_name_in_its_session_folder(tmp_path):
    tmp, uploads = tmp_path / "gradio-tmp", tmp_path / "_uploads"
    tmp.mkdir()
    src = tmp / "data.jsonl"
    src.write_text('{"text": "a"}\n')
    mine, theirs = session_dir(uploads, "alice"), session_dir(uploads, "bob")
    assert mine != theirs and "alice" not in str(mine)
    first = keep_upload(str(src), mine, suffixes=[".jsonl"])
    assert first.parent == mine and first.name.endswith("-data.jsonl") and first.read_text() == src.read_text()
    src.unlink()  # gradio cleans its temp dir: the kept copy stays
    assert first.exists()
    src.write_text('{"text": "a"}\n')
    assert keep_upload(str(src), mine) == first and len(list(mine.iterdir())) == 1  # the same file is kept once
    assert keep_upload(str(src), theirs).name != first.name  # the name is keyed per session: nothing to guess from content


def test_upload_is_checked_before_anything_is_copied(tmp_path):
    src = tmp_path / "evil.exe"
    src.write_bytes(b"MZ")
    with pytest.raises(DataError, match="unsupported file type '.exe'"):
        keep_upload(str(src), tmp_path / "up", suffixes=[".jsonl"])
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(DataError, match="the limit is 0 MB") as err:
        keep_upload(str(big), tmp_path / "up", max_bytes=1024)
    assert err.value.render("pt-BR") == "big.jsonl tem 0 MB; o limite é 0 MB. Envie uma amostra dos dados."
    assert not (tmp_path / "up").exists()


def test_sweep_removes_a_finished_session_and_old_files_but_keeps_what_runs_name(tmp_path):
    runs, uploads = tmp_path, tmp_path / "_uploads"
    src = tmp_path / "d.jsonl"
    src.write_text("{}\n")
    a1 = keep_upload(str(src), session_dir(uploads, "a"))
    src.write_text('{"b": 1}\n')
    a2 = keep_upload(str(src), session_dir(uploads, "a"))
    b_old = keep_upload(str(src), session_dir(uploads, "b"))
    os.utime(b_old, (time.time() - 3 * 86400,) * 2)
    (runs / "r1").mkdir()
    (runs / "r1" / "config.yaml").write_text(f"dataset: {a2}\n")
    assert sweep_uploads(uploads, runs, session="a") == 2  # a1 (session ended) and b_old (older than a day)
    assert not a1.exists() and a2.exists() and not b_old.exists()
    # b's session may still be open: its (now empty) folder stays until it has been empty for a day, or b's session ends
    assert session_dir(uploads, "b").is_dir()
    os.utime(session_dir(uploads, "b"), (time.time() - 3 * 86400,) * 2)
    sweep_uploads(uploads, runs)
    assert not session_dir(uploads, "b").exists()


def test_an_upload_is_never_swept_from_under_a_live_session(tmp_path, monkeypatch):
    """Other visitors close their tabs (their sessions end) at the worst moment: after a new session's folder is made
    and before its first upload is copied into it. The upload still succeeds."""
    import shutil

    from engine.views import uploads as up

    runs, upload_dir = tmp_path, tmp_path / "_uploads"
    src = tmp_path / "data.jsonl"
    src.write_text('{"text": "a"}\n')
    real_copy = shutil.copyfile

    def copy_after_other_sessions_end(a, b, *args, **kw):
        for other in ("gone-1", "gone-2"):
            sweep_uploads(upload_dir, runs, session=other)  # the folder of the new session is empty right now
        return real_copy(a, b, *args, **kw)

    monkeypatch.setattr(up.shutil, "copyfile", copy_after_other_sessions_end)
    kept = keep_upload(str(src), session_dir(upload_dir, "new-visitor"))
    assert kept.read_text() == src.read_text()


def test_many_session_ends_race_uploads(tmp_path):
    """Many sessions end while others upload, on threads (as gradio runs them): every upload lands and stays."""
    import threading

    runs, upload_dir = tmp_path, tmp_path / "_uploads"
    upload_dir.mkdir()
    src = tmp_path / "data.jsonl"
    src.write_text('{"text": "a"}\n')
    errors: list[BaseException] = []
    kept: list = []
    done = threading.Event()

    def end_sessions():
        i = 0
        while not done.is_set():
            sweep_uploads(upload_dir, runs, session=f"ended-{i}")
            i += 1

    def upload(n):
        try:
            for k in range(40):
                kept.append(keep_upload(str(src), session_dir(upload_dir, f"visitor-{n}-{k}")))
        except BaseException as exc:  # noqa: BLE001 - collected and reported below
            errors.append(exc)

    enders = [threading.Thread(target=end_sessions) for _ in range(4)]
    uploaders = [threading.Thread(target=upload, args=(n,)) for n in range(4)]
    for t in enders + uploaders:
        t.start()
    for t in uploaders:
        t.join()
    done.set()
    for t in enders:
        t.join()
    assert not errors, errors
    assert len(kept) == 160 and all(p.exists() for p in kept)


def test_export_paths_are_unguessable_and_private(tmp_path):
    one, two = export_path("run-1", ".zip"), export_path("run-1", ".zip")
    assert one != two and one.name == "run-1.zip" and one.parent.parent == two.parent.parent
    assert len(one.parent.name) >= 16 and (one.parent.parent.stat().st_mode & 0o077) == 0
