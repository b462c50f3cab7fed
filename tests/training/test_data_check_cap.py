"""The data check looks at the first CHECK_ROWS rows of a large dataset and says so (the run still reads them all)."""

from __future__ import annotations

from engine.config import TrainConfig
from engine.training import data_check


def test_a_large_dataset_is_checked_on_its_first_rows(monkeypatch, tmp_path):
    monkeypatch.setattr(data_check, "CHECK_ROWS", 50)
    cfg = TrainConfig(method="scratch", base_model="builtin:compact-mini", dataset="builtin:instructions", max_seq_len=64)
    ins = data_check.inspect_dataset(cfg, tmp_path)
    assert "the check looked at the first 50 of 194 rows; the run uses them all" in ins.summary
