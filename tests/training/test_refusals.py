"""Refusals before side effects: a training config refused for its settings leaves no run folder behind, from the
command line (`python -m engine train`) and from the page (JobManager.start), and the message names the field."""

from __future__ import annotations

import pytest

from engine.cli import main
from engine.config import QuantSettings, TrainConfig
from engine.errors import EngineError
from engine.hardware.device import ENV_CPU_FP16_AMP
from engine.training.jobs import JobManager

REFUSED = [
    # (why, CLI flags, the same as a config, env for the device)
    ("fp16 on a CPU", ["--precision", "fp16"], dict(precision="fp16"), {}),
    ("4-bit compute in fp16 on a CPU", ["--method", "qlora", "--quant-compute-dtype", "fp16"],
     dict(method="qlora", quant=QuantSettings(mode="4bit", compute_dtype="fp16")), {}),
    ("bf16 on a stand-in T4", ["--precision", "bf16"], dict(precision="bf16"), {ENV_CPU_FP16_AMP: "1"}),
    ("FSDP on a CPU", ["--distributed", "fsdp"], dict(distributed="fsdp"), {}),
]


def _nothing_new(runs, before: set) -> bool:
    return {p.name for p in runs.iterdir()} == before if runs.exists() else not before


@pytest.mark.parametrize(("why", "flags", "fields", "env"), REFUSED, ids=[r[0] for r in REFUSED])
@pytest.mark.parametrize("named", [True, False], ids=["named", "default-name"])
def test_the_cli_refuses_before_creating_the_run_folder(why, flags, fields, env, named, tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(runs))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    name = ["--run-name", "refused"] if named else []
    assert main(["train", "--dataset", "builtin:dates", *flags, *name]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and ("precision" in err or "compute_dtype" in err or "FSDP" in err), err
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize(("why", "flags", "fields", "env"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_page_refuses_before_creating_the_run_folder(why, flags, fields, env, tmp_path, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    runs = tmp_path / "runs"
    runs.mkdir()
    jobs = JobManager(runs)
    with pytest.raises(EngineError):
        jobs.start(TrainConfig(dataset="builtin:dates", run_name="refused", **fields))
    assert not any(runs.iterdir()) and jobs.active() is None
