"""Shared fixtures: an offline environment and a tiny pretrained built-in model in a temp runs dir."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory) -> Path:
    """A runs directory with the built-in compact-mini 'pretrained' for a few steps (fast, real code path)."""
    from engine.train import builtin_pretrain_config, run_training

    runs = tmp_path_factory.mktemp("runs")
    cfg = dataclasses.replace(builtin_pretrain_config("compact-mini"), max_steps=4, micro_batch_size=4, max_seq_len=64, save_steps=100, logging_steps=1)
    run_training(cfg, runs / "_builtin" / "compact-mini", runs_dir=runs)
    assert (runs / "_builtin" / "compact-mini" / "model" / "config.json").exists()
    return runs


@contextlib.contextmanager
def running_app(runs: Path, **build_kwargs):
    """The whole app, launched in-process on a free local port (as `python app.py` serves it); closed on exit."""
    import app

    demo = app.build_app(runs, **build_kwargs)
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        yield demo
    finally:
        demo.close()
