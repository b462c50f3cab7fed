"""'Your runs': predicted vs measured peaks read back from run folders (damaged and missing files included), the
correction of this machine's card, and the panel's text and scatter frame."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import MemoryQuery
from engine.estimator.catalog import tier_by_name
from engine.estimator.own_runs import capacity_correction, run_points
from engine.hardware.device import DeviceInfo
from engine.views.estimate_view import runs_frame, your_runs_outputs

T4 = DeviceInfo(kind="cuda", name="Tesla T4", total_gib=14.6, bf16=False, capability=(7, 5))
CPU = DeviceInfo(kind="cpu", name="Some CPU", total_gib=16.0, bf16=True)


def write_run(runs_dir: Path, name: str, events: list[dict] | None, raw: str = "") -> Path:
    d = runs_dir / name
    d.mkdir(parents=True)
    if events is not None or raw:
        text = "".join(json.dumps(e) + "\n" for e in events or []) + raw
        (d / "events.jsonl").write_text(text, encoding="utf-8")
    return d


def finished(predicted: float, measured: float, t: float, device: str = "Tesla T4", kind: str = "cuda") -> list[dict]:
    return [{"type": "start", "time": t - 10, "method": "qlora", "base_model": "llama-2-7b", "device": device, "device_kind": kind},
            {"type": "memory", "time": t - 9, "predicted_gib": predicted, "predicted_total_gib": predicted + 1, "device": device},
            {"type": "progress", "time": t - 5, "step": 1, "loss": 2.0, "mem_gib": measured},
            {"type": "done", "time": t, "output": "adapter", "steps": 1, "peak_gib": measured, "predicted_gib": predicted}]


@pytest.fixture
def runs(tmp_path) -> Path:
    write_run(tmp_path, "b-late", finished(4.0, 4.4, 200))
    write_run(tmp_path, "a-early", finished(5.0, 5.5, 100))
    write_run(tmp_path, "c-cpu", finished(1.0, 2.0, 300, device="Some CPU", kind="cpu"))
    write_run(tmp_path, "d-running", finished(3.0, 3.0, 400)[:3])  # no done event yet
    write_run(tmp_path, "e-missing", None)  # no events.jsonl at all
    write_run(tmp_path, "f-damaged", None, raw='{"type": "start"\nnot json at all\n\x00\x01garbage{{{\n')
    write_run(tmp_path, "g-torn", finished(2.0, 2.2, 500)[:3], raw='{"type": "done", "peak_gib": 2.')  # torn last line
    write_run(tmp_path, "h-outlier", finished(2.0, 9.0, 600))  # measured something else: kept as a point, not a correction
    (tmp_path / "_uploads").mkdir()
    return tmp_path


def test_run_points_reads_finished_runs_and_skips_broken_ones(runs):
    pts = run_points(runs)
    assert [p.name for p in pts] == ["a-early", "b-late", "c-cpu", "h-outlier"]  # oldest first
    a = pts[0]
    assert a.predicted_gib == 5.0 and a.measured_gib == 5.5 and a.device == "Tesla T4" and a.device_kind == "cuda"
    assert a.error == pytest.approx((5.0 - 5.5) / 5.5)
    assert run_points(runs / "no-such-dir") == []


def test_capacity_correction_from_this_cards_gpu_runs(runs):
    tier = tier_by_name("t4-16gb")
    corr = capacity_correction(run_points(runs), "Tesla T4", tier)
    assert corr is not None and corr.runs == 2 and corr.ratio == pytest.approx(1.1)  # the CPU run and the outlier are left out
    ctx = tier.cuda_context_gib
    assert corr.tier.usable_gib == pytest.approx(ctx + (tier.usable_gib - ctx) / 1.1, abs=1e-3)
    assert "2 finished run(s)" in corr.why and "10% more" in corr.why
    assert capacity_correction(run_points(runs), "NVIDIA A100", tier) is None  # runs of another card say nothing


def test_your_runs_outputs_gpu_cpu_shared_and_empty(runs, tmp_path_factory):
    q = MemoryQuery(model="builtin:compact-mini", task="lora")
    md, frame = your_runs_outputs(q, runs, device=T4)
    assert "4 finished" in md and "On this machine (Tesla T4)" in md and "usable memory counts as" in md
    assert list(frame.columns) == ["predicted GiB", "measured GiB", "error %", "run", "device"] and len(frame) == 4
    md, _ = your_runs_outputs(q, runs, device=CPU)
    assert "never correct a card's capacity" in md and "whole process" in md  # which figure is the process, which the model
    md, frame = your_runs_outputs(q, runs, device=T4, lang="pt-BR")
    assert "4 terminada(s)" in md and "Nesta máquina (Tesla T4)" in md and "processo inteiro" in md
    assert list(frame.columns) == ["previsto (GiB)", "medido (GiB)", "erro %", "execução", "dispositivo"]
    md, frame = your_runs_outputs(q, runs, shared=True, device=T4)
    assert "not listed" in md and frame is None
    md, frame = your_runs_outputs(q, tmp_path_factory.mktemp("empty"), device=T4)
    assert "No finished run yet" in md and frame is None
    assert runs_frame([]).empty
