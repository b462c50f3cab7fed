"""Build the GPU kit here (CPU, with the registry): the wheels the GPU machine's image lacks, checked for size, and the one
device command that installs them there and runs every GPU check.

    python -m bench.gpu_kit.prepare [--kit .gpu_kit] [--budget-s 420] [--offline]

1. Which wheels: bench/gpu_kit/image.yaml says what the image holds (Python 3.12, torch 2.11 with CUDA 13, transformers
   5.17, ...) and what the checks need (requirements.txt's pins and their dependencies); every needed package the image
   lacks, or holds at another version, is carried, as a Python 3.12 manylinux x86-64 wheel (`pip download --no-deps
   --only-binary=:all: --python-version 3.12`). torch is never carried: the kit runs against the torch it finds.
2. bitsandbytes reduced: its wheel (43 MB) holds one native library per CUDA version (11.8 to 13.2), ROCm and XPU; only
   the CUDA 13 ones and the CPU one are kept (`reduce_bitsandbytes`).
3. The size check: the working tree that travels (tracked files and untracked ones git does not ignore) plus the kit
   must stay under 60 MiB (the device tool's limit is 64 MiB). The wheel list is recorded in bench/gpu_kit/wheels.json,
   so the same check runs offline in the tests (tests/test_gpu_kit.py).
4. The command: printed, with the `run` call to make (carry the kit folder, timeout 600 s). `--offline` skips the
   downloads and checks the recorded list only.

The kit folder is git-ignored (.gitignore: /.gpu_kit/) and must sit inside the checkout the device tool sends.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
IMAGE_FILE = Path(__file__).with_name("image.yaml")
WHEELS_FILE = Path(__file__).with_name("wheels.json")
KIT_DIR = ROOT / ".gpu_kit"
LIMIT_MIB = 60.0  # the device tool refuses a working tree over 64 MiB; 4 MiB of room for what a session adds
COMMAND_LIMIT = 2000  # characters of one device command


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): "huggingface_hub" -> "huggingface-hub"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: Path = ROOT / "requirements.txt") -> dict[str, str]:
    """{normalized name: version} of requirements.txt's `name==version` lines."""
    out = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            out[normalize(m.group(1))] = m.group(2)
    return out


def image() -> dict[str, Any]:
    return yaml.safe_load(IMAGE_FILE.read_text(encoding="utf-8"))


def carry_list(data: dict[str, Any] | None = None, pinned: dict[str, str] | None = None, *, optional: bool = True) -> list[tuple[str, str]]:
    """[(name, version)] the kit carries: every needed package the image lacks or holds at another version."""
    data = data or image()
    pinned = pins() if pinned is None else pinned
    have = {normalize(k): str(v) for k, v in (data.get("have") or {}).items()}
    needs = data["needs"]
    wanted = [(n, pinned[normalize(n)]) for n in needs["pinned"]] + list((needs.get("deps") or {}).items())
    if optional:
        wanted += list((needs.get("optional") or {}).items())
    return [(n, str(v)) for n, v in wanted if have.get(normalize(n)) != str(v)]


def wheel_name(path: Path) -> tuple[str, str]:
    """(normalized distribution name, version) of a wheel file name."""
    dist, version = path.name.split("-")[:2]
    return normalize(dist), version


def download(kit: Path, wanted: list[tuple[str, str]], data: dict[str, Any]) -> None:
    """pip download the missing wheels for the device's Python into `kit` (those already there are kept)."""
    kit.mkdir(parents=True, exist_ok=True)
    present = {wheel_name(p) for p in kit.glob("*.whl")}
    todo = [f"{n}=={v}" for n, v in wanted if (normalize(n), v) not in present]
    if not todo:
        return
    platforms = [arg for p in data["platforms"] for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", data["python"],
           "--implementation", "cp", *platforms, "-d", str(kit), *todo]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def reduce_bitsandbytes(wheel: Path, cuda_major: str) -> tuple[int, int]:
    """Rewrite bitsandbytes' wheel in place with only its CPU library and its CUDA `cuda_major` libraries; returns the
    (bytes before, bytes after).

    Why this is safe: bitsandbytes opens exactly one native library, chosen from torch's own CUDA version
    (bitsandbytes/cextension.py: libbitsandbytes_cuda{torch.version.cuda without the dot}.so, e.g. cuda130 for torch
    2.11+cu130; BNB_CUDA_VERSION overrides it), or the CPU one without CUDA. The CUDA 11/12, ROCm and XPU libraries are
    never opened on a CUDA 13 torch, so dropping them changes nothing there; the device's torch is CUDA 13 (image.yaml).
    How: the archive is copied without those files, and their lines are dropped from RECORD (pip checks the hashes
    of the files a wheel holds against RECORD; no other file changes)."""
    before = wheel.stat().st_size
    keep = re.compile(rf"libbitsandbytes_(cpu|cuda{cuda_major}\d)\.so$")
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        dropped = {i.filename for i in src.infolist() if i.filename.endswith(".so") and not keep.search(i.filename)}
        if not dropped:
            tmp.unlink()
            return before, before  # already reduced
        for info in src.infolist():
            if info.filename in dropped:
                continue
            data = src.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = [line for line in data.decode().splitlines() if line.split(",")[0] not in dropped]
                data = ("\n".join(lines) + "\n").encode()
            dst.writestr(info, data)
    tmp.replace(wheel)
    return before, wheel.stat().st_size


def tree_bytes(root: Path = ROOT) -> int | None:
    """Bytes of what the device tool sends besides carried paths: tracked files and untracked ones git does not ignore
    (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sum((root / name).stat().st_size for name in out.decode().split("\0") if name and (root / name).is_file())


def recorded() -> dict[str, Any]:
    return json.loads(WHEELS_FILE.read_text(encoding="utf-8"))


def size_report(tree: int, wheels: list[dict[str, Any]]) -> dict[str, Any]:
    kit = sum(w["bytes"] for w in wheels)
    total = tree + kit
    return {"tree_mib": round(tree / 2**20, 2), "kit_mib": round(kit / 2**20, 2), "total_mib": round(total / 2**20, 2),
            "limit_mib": LIMIT_MIB, "ok": total / 2**20 < LIMIT_MIB}


def device_command(kit: str = ".gpu_kit", budget_s: int = 420) -> str:
    """The one command to run on the GPU machine (repository root, the kit carried): install, then every check."""
    return ("set -o pipefail; export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 "
            "TOKENIZERS_PARALLELISM=false; "
            f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site {kit}/*.whl "
            f"&& export PYTHONPATH=/tmp/site:$PWD || exit 3; "
            f"python3 -m bench.gpu_kit.check --out \"$OUT\" --budget-s {budget_s} 2>&1")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kit", type=Path, default=KIT_DIR, help="the kit folder (inside the checkout, git-ignored)")
    ap.add_argument("--budget-s", type=int, default=420, help="the checks' time budget in the printed command")
    ap.add_argument("--offline", action="store_true", help="no downloads: check the recorded wheel list only")
    ap.add_argument("--no-optional", action="store_true", help="leave out liger-kernel")
    args = ap.parse_args(argv)
    data = image()
    wanted = carry_list(data, optional=not args.no_optional)
    if args.offline:
        wheels = recorded()["wheels"]
    else:
        download(args.kit, wanted, data)
        cuda_major = str(data["torch_cuda"]).split(".")[0]
        for wheel in args.kit.glob("bitsandbytes-*.whl"):
            before, after = reduce_bitsandbytes(wheel, cuda_major)
            print(f"bitsandbytes: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB (CPU + CUDA {cuda_major} libraries)")
        names = {normalize(n): v for n, v in wanted}
        stale = [p for p in args.kit.glob("*.whl") if wheel_name(p) not in names.items()]
        for p in stale:  # two versions of one package stop the whole install there
            print(f"removing {p.name} (not in the carry list)")
            p.unlink()
        wheels = [{"file": p.name, "bytes": p.stat().st_size} for p in sorted(args.kit.glob("*.whl"))]
        WHEELS_FILE.write_text(json.dumps({"image": IMAGE_FILE.name, "wheels": wheels}, indent=1) + "\n", encoding="utf-8")
        missing = set(names.items()) - {wheel_name(Path(w["file"])) for w in wheels}
        if missing:
            print(f"missing wheels: {sorted(missing)}", file=sys.stderr)
            return 1
    tree = tree_bytes()
    if tree is None:
        print("not a git checkout: cannot size the working tree", file=sys.stderr)
        return 1
    report = size_report(tree, wheels)
    for w in wheels:
        print(f"  {w['bytes'] / 2**20:6.2f} MiB  {w['file']}")
    print(f"travels: tree {report['tree_mib']} MiB + kit {report['kit_mib']} MiB = {report['total_mib']} MiB "
          f"(limit {LIMIT_MIB:.0f} MiB): {'OK' if report['ok'] else 'TOO LARGE'}")
    if not report["ok"]:
        return 1
    kit_rel = args.kit.resolve().relative_to(ROOT).as_posix()
    command = device_command(kit_rel, args.budget_s)
    assert len(command) < COMMAND_LIMIT
    print("\nOn a session lent a GPU, call the device tool's run with:")
    print(f"  carry: [\"{kit_rel}\"]\n  timeout_s: 600\n  command: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
