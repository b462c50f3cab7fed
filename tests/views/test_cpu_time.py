"""The estimator's CPU verdict says how slow a training is there (engine/estimator/cpu_time.py): an 8B QLoRA "fits" in
16 GB of RAM and would take days, the built-in model takes seconds; in the cards table and under the totals, in both
languages (issue 32)."""

from __future__ import annotations

from engine.config import MemoryQuery
from engine.estimator.cpu_time import cpu_step_seconds, train_flops_per_token
from engine.views.estimate_view import estimate_outputs, long_duration

BIG = MemoryQuery(model="meta-llama/Llama-3.1-8B-Instruct", task="qlora", weight_precision="nf4", batch=1, seq_len=512, grad_ckpt=True)
SMALL = MemoryQuery(model="builtin:compact-mini", task="full", batch=16, seq_len=72)


def test_the_flops_of_a_step_follow_the_method_and_checkpointing():
    assert train_flops_per_token(1_000, "full", False) == 6_000 and train_flops_per_token(1_000, "qlora", True) == 6_000
    assert train_flops_per_token(1_000, "lora", False) == 4_000
    assert cpu_step_seconds(MemoryQuery(model="x", task="inference"), 10**9) is None
    assert cpu_step_seconds(MemoryQuery(model="x", task="full", batch=2, seq_len=100, grad_accum=4), 10**9, gflops=100) == 800 * 6 / 100


def test_an_8b_qlora_fits_a_16_gb_cpu_and_the_estimator_says_it_would_take_days():
    panel = estimate_outputs(BIG, "cpu-16gb", "en")
    totals, cards = panel[0], panel[3]
    assert "Training on a CPU" in totals and "days" in totals and "Too slow to be practical" in totals and "GPU" in totals
    cpu_row = cards.iloc[0].tolist()
    assert "fits" in cpu_row[-1] and "min a step" in cpu_row[-1]  # fits, and how long a step takes there
    assert not any("a step" in row[-1] for row in cards.values.tolist() if "GPU" in row[0] or "NVIDIA" in row[0])  # GPUs: the verdict only
    pt = estimate_outputs(BIG, "cpu-16gb", "pt-BR")[0]
    assert "Treino numa CPU" in pt and "dias" in pt and "Lento demais" in pt


def test_the_builtin_model_on_a_cpu_is_not_called_slow():
    totals = estimate_outputs(SMALL, "cpu-16gb", "en")[0]
    assert "Training on a CPU" in totals and "Too slow" not in totals
    assert "Training on a CPU" not in estimate_outputs(SMALL, "t4-16gb", "en")[0]  # a GPU card: no CPU words


def test_durations_read_as_people_say_them():
    assert [long_duration(s) for s in (0.34, 42, 300, 3 * 3600, 5 * 86400)] == ["0.3 s", "42 s", "5 min", "3 h", "5 days"]
    assert long_duration(0.34, "pt-BR") == "0,3 s" and long_duration(5 * 86400, "pt-BR") == "5 dias"
