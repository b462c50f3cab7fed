"""How the page's events queue: one generation or merge at a time on the device, one training start at a time, instant form updates."""

from __future__ import annotations

GPU = {"concurrency_limit": 1, "concurrency_id": "gpu"}  # one generation, evaluation, export or merge at a time
JOBS = {"concurrency_limit": 1, "concurrency_id": "jobs"}  # one start, resume or retry of a training run at a time
QUIET = {"queue": False, "show_progress": "hidden"}  # instant updates as the form changes
ESTIMATE = {"concurrency_limit": 2, "concurrency_id": "estimate"}  # the estimator's architecture work, queued (a shared app's visitors take turns)
