"""The GPU kit: every CUDA check of this project in one device call (docs/gpu.md starts with its two commands).

    python -m bench.gpu_kit.prepare          # here: the wheels the GPU machine lacks, the size check, the device command
    python -m bench.gpu_kit.check --out DIR  # there: every section within --budget-s (420 s), results in DIR
    python -m bench.gpu_kit.check --dry-run --out DIR   # CPU, tiny shapes (tests/test_gpu_kit.py runs it in CI)

One module per job: prepare (the kit), check (the orchestrator), common (what the sections share) and one module per
section: env_check (a), gpu_tests (b), t4_run (c, T4 conditions), grid (d, the estimator grid), throughput (e),
playground (f). Data: image.yaml (what the GPU machine's image holds), wheels.json (the wheels the kit carries, with
their sizes, as the last `prepare` wrote them).
"""
