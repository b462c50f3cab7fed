"""Shipped fine-tuned examples: a finished run copied small into presets/models/NAME, with its model card and a record.

The playground's built-in model is a base model (it continues text, it does not answer), so a newcomer who opens the
playground without training sees nothing that fine-tuning did. `ship_example` copies a finished full fine-tune (the
first run's recipe: engine/views/finetune_form.py `FT_DEFAULTS`) into the repository beside the built-in model, its
weights in 16 bits (the same choice as the shipped built-in, engine/training/ship.py), with

- `README.md`: the model card the Hub push writes (engine/export/card.py `model_card`), from the run's own events;
- `recorded.json`: how it was made (the command), the run's steps and time, the date-task accuracy before and after
  training as the run measured it, and the accuracy of the stored 16-bit copy measured again here (greedy, the same 100
  test questions), which tests/export/test_shipped_example.py checks the shipped copy still reaches.

It is then `builtin:NAME` (engine/models/references.py loads any folder in presets/models), and the playground lists
it (engine/views/choices.py). Made by `python -m engine ship-example RUN NAME`; nothing at runtime writes into presets/.
"""

from __future__ import annotations

import datetime
import json
import platform
import shutil
from pathlib import Path
from typing import Any

RECORD_FILE = "recorded.json"
_WEIGHT_FILES = ("model.safetensors",)


def example_accuracy(folder: Path) -> tuple[float, int]:
    """(accuracy, questions) of the model in `folder` on the date task's test questions, greedy, fp32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..inference.tasks import date_items, evaluate_task
    from ..models import compact  # noqa: F401  (registers compact_llm with the Auto classes)

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    score = evaluate_task(model, tokenizer, date_items("test"))
    return score.accuracy, score.n


def ship_example(run_dir: Path, dest: Path, *, command: str, store: str = "fp16") -> dict[str, Any]:
    """Copy the finished full fine-tune in `run_dir` to `dest` (presets/models/NAME) in `store` precision, with its
    model card and recorded.json; returns the record."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..models import compact  # noqa: F401
    from ..runs import atomic_replace_dir, read_events, summarize
    from .card import model_card

    run_dir = Path(run_dir)
    summary = summarize(run_dir, alive=False)
    if summary.state != "finished" or summary.output != "model":
        raise ValueError(f"{run_dir.name}: a finished full fine-tune is needed (state {summary.state}, output {summary.output})")
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    AutoModelForCausalLM.from_pretrained(str(run_dir / "model"), dtype=torch.float32).to(dtypes[store]).save_pretrained(str(tmp))
    for path in (run_dir / "model").iterdir():  # the tokenizer and chat template beside the weights
        if path.is_file() and not (tmp / path.name).exists() and path.name not in _WEIGHT_FILES:
            shutil.copy2(path, tmp / path.name)
    accuracy, n = example_accuracy(tmp)
    events = read_events(run_dir)
    done = next((e for e in reversed(events) if e.get("type") == "done"), {})
    scores = {e.get("when"): e.get("accuracy") for e in events if e.get("type") == "task_score"}
    start = next((e for e in events if e.get("type") == "start"), {})
    record = {
        "name": dest.name,
        "made_by": command,
        "date": datetime.date.today().isoformat(),
        "base_model": summary.base_model,
        "dataset": summary.dataset,
        "steps": done.get("steps"),
        "train_seconds": done.get("duration_s"),
        "eval_loss": done.get("eval_loss"),
        "date_task_accuracy_in_run": {"before": scores.get("before"), "after": scores.get("after")},
        "stored_precision": store,
        "date_task_accuracy": round(accuracy, 4),
        "date_task_questions": n,
        "device": start.get("device_kind"),
        "machine": f"{platform.machine()} {platform.system()}, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "eval": "greedy answers to the date task's test questions (engine/inference/tasks.py evaluate_task), the stored weights "
                "read back in fp32 on the CPU",
    }
    card = model_card(run_dir, "model", f"compact-llm-lab/{dest.name}")
    (tmp / "README.md").write_text(card, encoding="utf-8")
    (tmp / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_replace_dir(tmp, dest)
    return record
