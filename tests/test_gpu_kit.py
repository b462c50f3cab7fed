"""The GPU kit (bench/gpu_kit) between two lent GPUs: the CPU dry run of the whole orchestration, the kit's size check
from the recorded wheel list (no network), the wheel list against the device image's data, bitsandbytes' reduction,
the device command, the MFU peaks and the grid rows joining the estimator's data."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from bench.gpu_kit import prepare
from bench.gpu_kit.grid import predicted, write_csv
from bench.gpu_kit.throughput import card_peak_tflops, mfu

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out, work = tmp_path_factory.mktemp("gpu_check"), tmp_path_factory.mktemp("gpu_work")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_kit.check", "--dry-run", "--out", str(out), "--work", str(work), "--budget-s", "900"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    return out, proc


def test_the_dry_run_runs_every_section_and_skips_the_cuda_ones_with_the_reason(dry_run):
    out, proc = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    sections = {name: json.loads((out / f"{name}.json").read_text()) for name in ("env", "gpu_tests", "t4", "grid", "throughput", "playground")}
    assert {n: s["status"] for n, s in sections.items()} == {"env": "ok", "gpu_tests": "ok", "t4": "skipped", "grid": "ok",
                                                             "throughput": "skipped", "playground": "ok"}
    for name in ("t4", "throughput"):
        assert sections[name]["reason"].startswith("needs CUDA")
    env = sections["env"]
    assert env["torch"]["cuda_available"] is False and env["device_lines"]["lines"] and env["torch_floor"]["missing"] is None
    assert env["bitsandbytes_selftest"] == {"status": "skipped", "reason": "needs CUDA"}
    assert len(sections["gpu_tests"]["collected"]) >= 3  # the GPU tests import and are found
    points = sections["grid"]["points"]
    assert len(points) == 2 and all(p["predicted"]["allocated_gib"] > 0 and p["loss"] > 0 for p in points)
    play = sections["playground"]
    assert all(play[k]["status"] == "ok" and play[k]["runs"][0]["tokens"] > 0 for k in ("16-bit", "8-bit", "4-bit"))
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# GPU check (dry run") and all(f"| {n}:" in summary for n in sections)


def test_the_dry_run_leaves_what_the_device_tool_brings_back(dry_run):
    """At most 8 files, one folder level, names of letters, digits, '.', '_' and '-' (the device tool's limits on $OUT)."""
    out, _ = dry_run
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(p.parent == out and re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in files)
    assert (out / "grid.csv").read_text().splitlines()[0].split(",") == list(prepare_columns())


def prepare_columns() -> list[str]:
    with open(ROOT / "bench" / "data" / "memory_calibration.csv", newline="", encoding="utf-8") as fh:
        return next(csv.reader(fh))


def test_the_kit_fits_the_device_tool_from_the_recorded_wheels():
    """The size check without the network: the recorded wheel list plus the working tree that travels, under 60 MiB."""
    tree = prepare.tree_bytes()
    if tree is None:
        pytest.skip("not a git checkout: the working tree that travels cannot be listed")
    report = prepare.size_report(tree, prepare.recorded()["wheels"])
    assert report["ok"], report
    assert report["total_mib"] < prepare.LIMIT_MIB < 64


def test_the_recorded_wheels_are_exactly_what_the_image_lacks():
    wheels = {prepare.wheel_name(Path(w["file"])) for w in prepare.recorded()["wheels"]}
    wanted = {(prepare.normalize(n), v) for n, v in prepare.carry_list()}
    assert wheels == wanted
    names = {n for n, _ in wanted}
    assert "torch" not in names  # the kit runs against the torch it finds
    assert {"transformers", "bitsandbytes", "peft", "trl", "datasets", "huggingface-hub"} <= names
    assert not {"accelerate", "safetensors"} & names  # the image has them at our pins
    pinned = prepare.pins()
    assert all(prepare.normalize(n) in pinned for n in prepare.image()["needs"]["pinned"])
    bnb = next(w for w in prepare.recorded()["wheels"] if w["file"].startswith("bitsandbytes-"))
    assert bnb["bytes"] < 10 * 2**20  # reduced from 43 MB to its CPU and CUDA 13 libraries


def test_bitsandbytes_keeps_only_its_cpu_and_cuda13_libraries(tmp_path):
    wheel = tmp_path / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
    libs = ["cpu", "cuda118", "cuda126", "cuda130", "cuda132", "rocm72", "xpu2026"]
    record = [f"bitsandbytes/libbitsandbytes_{x}.so,sha256=x,3" for x in libs] + ["bitsandbytes/__init__.py,sha256=y,1", "bitsandbytes-0.50.2.dist-info/RECORD,,"]
    with zipfile.ZipFile(wheel, "w") as z:
        for x in libs:
            z.writestr(f"bitsandbytes/libbitsandbytes_{x}.so", b"lib")
        z.writestr("bitsandbytes/__init__.py", b"#")
        z.writestr("bitsandbytes-0.50.2.dist-info/RECORD", "\n".join(record) + "\n")
    prepare.reduce_bitsandbytes(wheel, "13")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        kept_record = z.read("bitsandbytes-0.50.2.dist-info/RECORD").decode()
    assert {n for n in names if n.endswith(".so")} == {f"bitsandbytes/libbitsandbytes_{x}.so" for x in ("cpu", "cuda130", "cuda132")}
    assert "cuda118" not in kept_record and "cuda130" in kept_record and "__init__.py" in kept_record
    assert prepare.reduce_bitsandbytes(wheel, "13")[0] == wheel.stat().st_size  # a second pass changes nothing


def test_the_device_command_installs_the_kit_and_runs_every_check():
    command = prepare.device_command(".gpu_kit", 420)
    assert len(command) < prepare.COMMAND_LIMIT
    assert "pip install -q --no-index --no-deps" in command and ".gpu_kit/*.whl" in command
    assert 'python3 -m bench.gpu_kit.check --out "$OUT" --budget-s 420' in command
    ignored = subprocess.run(["git", "check-ignore", "-q", ".gpu_kit/x.whl"], cwd=ROOT)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0  # the kit folder never gets committed


def test_the_docs_start_with_the_two_commands():
    text = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
    head = text[:2500]  # the top of the page
    assert head.index("python -m bench.gpu_kit.prepare") < head.index("python3 -m bench.gpu_kit.check")
    assert prepare.device_command(".gpu_kit", 420) in text


def test_every_card_peak_has_a_source_and_mfu_uses_the_dtype():
    data = yaml.safe_load((ROOT / "presets" / "gpu_peaks.yaml").read_text(encoding="utf-8"))
    assert all(c["source"] and c["match"] and "fp16" in c["tflops"] for c in data["cards"])
    assert card_peak_tflops("NVIDIA H200", "bf16") == 989.4
    assert card_peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert card_peak_tflops("NVIDIA A100-SXM4-40GB", "fp16") == 312.0
    assert card_peak_tflops("Tesla T4", "bf16") is None and card_peak_tflops("Tesla T4", "fp16") == 65.0
    assert card_peak_tflops("Some Card", "bf16") is None
    assert mfu(1000.0, 10**9, "lora", "NVIDIA H200", "bf16") == round(1000 * 4e9 / 989.4e12, 4)


def test_grid_rows_join_the_estimators_data_as_a_source_of_their_own(tmp_path, capsys):
    from bench import memory_accuracy
    from engine.config import QuantSettings, TrainConfig

    cfg = TrainConfig(method="qlora", base_model="llama-3.2-1b", dataset="builtin:dates", quant=QuantSettings(mode="4bit"), micro_batch_size=4,
                      max_seq_len=512, grad_checkpointing=True)
    pred = predicted(cfg, "bf16", "llama-3.2-1b")
    points = [{"shape": "llama-3.2-1b", "method": "qlora", "batch": 4, "seq": 512, "grad_ckpt": True, "dtype": "bf16", "device": "TEST CARD",
               "optimizer": "AdamW", "allocated_gib": round(pred["allocated_gib"] * 1.1, 3), "reserved_gib": round(pred["reserved_gib"] * 1.2, 3),
               "predicted": pred},
              {"shape": "llama-3.2-1b", "method": "qlora", "batch": 64, "seq": 4096, "grad_ckpt": False, "dtype": "bf16", "device": "TEST CARD",
               "oom": "CUDA out of memory", "predicted": pred}]
    path = tmp_path / "grid.csv"
    write_csv(path, points)
    rows = list(csv.DictReader(open(path, newline="", encoding="utf-8")))
    assert len(rows) == 1 and rows[0]["gpu"] == "TEST CARD" and "query=" in rows[0]["notes"]  # the OOM point has no measurement
    extra = memory_accuracy.extra_rows([path])
    (split, metric, query, _), = extra.values()
    assert (split, metric) == ("report", "alloc") and query["batch"] == 4
    records = memory_accuracy.run(memory_accuracy.DEFAULT_CSV, [path])
    ours = [r for r in records if r["row"] >= memory_accuracy.EXTRA_BASE]
    assert len(ours) == 1 and ours[0]["source"].startswith("compact-llm-lab bench/gpu_kit/grid.py on TEST CARD")
    assert ours[0]["ours_err"] == pytest.approx(1 / 1.1 - 1, abs=0.01)


def test_a_section_past_its_share_is_killed_and_the_rest_reported(tmp_path):
    """A budget too small: the first section is killed at its share (status timeout, its JSON kept), the next one is not
    started because the budget is spent, and summary.md still says so. Each section first sleeps 60 s (the check's test
    hook), so the grid outlives its 9.6 s share of 14 s on any machine."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", COMPACT_LAB_KIT_DELAY_S="60")
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_kit.check", "--dry-run", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"),
                           "--only", "grid,playground", "--budget-s", "14"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    grid_json = json.loads((tmp_path / "out" / "grid.json").read_text())
    play_json = json.loads((tmp_path / "out" / "playground.json").read_text())
    assert grid_json["status"] == "timeout" and "killed at its share" in grid_json["reason"] and grid_json["title"].startswith("estimator grid")
    assert play_json["status"] == "not started" and "budget is spent" in play_json["reason"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| grid: estimator grid (calibration rows) | timeout |" in summary and "| playground: " in summary and "| not started |" in summary
