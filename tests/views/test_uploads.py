"""Uploads kept in the runs directory, named by content (the same file is kept once)."""

from __future__ import annotations

from engine.views.uploads import keep_upload


def test_upload_is_copied_once_by_content(tmp_path):
    tmp, kept = tmp_path / "gradio-tmp", tmp_path / "_uploads"
    tmp.mkdir()
    kept.mkdir()
    src = tmp / "data.jsonl"
    src.write_text('{"text": "a"}\n')
    first = keep_upload(str(src), kept)
    assert first.parent == kept and first.name.endswith("-data.jsonl") and first.read_text() == src.read_text()
    src.unlink()  # gradio cleans its temp dir: the kept copy stays
    assert first.exists()
    src.write_text('{"text": "a"}\n')
    assert keep_upload(str(src), kept) == first and len(list(kept.iterdir())) == 1
    src.write_text('{"text": "b"}\n')
    assert keep_upload(str(src), kept) != first and len(list(kept.iterdir())) == 2
