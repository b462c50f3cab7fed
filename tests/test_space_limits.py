"""A Space's limits as one table (presets/space_limits.yaml, engine/space_limits.py): every field that costs time or
memory is bounded before a run enters the line, each refusal names its limit and variable in both languages, one
visitor has one run in the line, and the worst run of every method the limits allow fits the Space's turn and memory."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from engine import i18n, space, space_limits
from engine.config import Method, TrainConfig
from engine.errors import EngineError
from engine.training.jobs import JobManager

LARGEST_ALLOWED_MODEL = "Qwen/Qwen2.5-0.5B"  # 0.92 GiB of bf16 safetensors: the largest catalog model under max_model_gib (1 GiB)


@pytest.fixture
def on_space(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/compact-llm-lab")
    monkeypatch.setenv("COMPACT_LAB_SHARED", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for env in space.LIMIT_ENV.values():
        monkeypatch.delenv(env, raising=False)


def _cfg(**kw) -> TrainConfig:
    base = dict(method="full", base_model="builtin:compact-mini", dataset="builtin:dates", max_steps=500, max_seq_len=72)
    return TrainConfig(**{**base, **kw})


def test_the_limits_are_one_table_with_a_variable_and_words_in_both_languages():
    rows = space_limits.table()["limits"]
    assert [f.name for f in dataclasses.fields(space_limits.SpaceLimits)] == list(rows)
    assert space.SpaceLimits is space_limits.SpaceLimits and space.LIMIT_ENV == {n: r["env"] for n, r in rows.items()}
    for name, row in rows.items():
        assert row["env"].startswith("COMPACT_LAB_SPACE_") and row["what"] and row["type"] in ("int", "float")
        if name.startswith("max_") and name not in ("max_minutes",):  # the turn is enforced while a run goes, and by max_work
            for lang in ("en", "pt-BR"):
                assert f"space.limit.{name}" in i18n.strings(lang), (name, lang)


REFUSED = [  # (id, the config, the limit its words name, en words, pt-BR words)
    ("ddp-64-gpus", dict(distributed="ddp", gpus=64), "max_processes", "at most 1 process(es) (you asked for 64 GPUs", "no máximo 1 processo(s)"),
    ("grpo-64-answers", dict(method="grpo", num_generations=64, micro_batch_size=64, max_seq_len=32, max_steps=10), "max_generations",
     "at most 16 answers per prompt while training (you asked for 64)", "no máximo 16 respostas"),
    ("grpo-8192-tokens", dict(method="grpo", num_generations=8, micro_batch_size=8, max_completion_length=8192, max_steps=10), "max_completion_length",
     "answers of at most 256 tokens while training (you asked for 8,192)", "no máximo 256 tokens"),
    ("grpo-answers-x-steps", dict(method="grpo", num_generations=16, micro_batch_size=16, max_completion_length=256, max_seq_len=72, max_steps=600),
     "max_minutes", "600 steps: 691,200 tokens trained and 2,461,568 answer tokens written", "600 passos"),
    ("batch-tokens", dict(micro_batch_size=4096, max_seq_len=256, max_steps=10), "max_batch_tokens", "(you asked for 4,096 x 256 = 1,048,576)",
     "4.096 x 256"),
    ("accumulation", dict(grad_accum=4096, max_steps=500), "max_minutes", "more than its turn of 15 minutes", "mais que a vez dele de 15 minutos"),
    ("evaluations", dict(eval_steps=1, max_steps=500), "max_evaluations", "at most 30 times per run (500 steps would evaluate 500 times)",
     "no máximo 30 vezes"),
    ("eval-fraction", dict(eval_fraction=0.4), "max_eval_fraction", "at most 0.25 of the data", "no máximo 0.25"),
]


@pytest.mark.parametrize(("change", "limit", "words_en", "words_pt"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_every_field_that_costs_time_or_memory_is_refused_above_its_limit(on_space, tmp_path, change, limit, words_en, words_pt):
    with pytest.raises(EngineError) as err:
        space.check_train_config(_cfg(**change), tmp_path)
    assert words_en in err.value.render("en") and space.LIMIT_ENV[limit] in err.value.render("en")
    assert words_pt in err.value.render("pt-BR") and space.LIMIT_ENV[limit] in err.value.render("pt-BR")


def test_the_memory_the_estimator_predicts_is_a_limit(on_space, tmp_path):
    with pytest.raises(EngineError) as err:
        space.check_train_config(_cfg(base_model=LARGEST_ALLOWED_MODEL, micro_batch_size=8, max_seq_len=256, max_steps=20), tmp_path)
    assert "GiB of memory" in err.value.render("en") and "COMPACT_LAB_SPACE_MAX_MEMORY_GIB" in err.value.render("pt-BR")


def test_the_default_run_of_every_method_fits(on_space, tmp_path):
    from engine.views.finetune_form import METHOD_DEFAULTS

    space.check_train_config(_cfg(), tmp_path)  # the first run
    for method, values in METHOD_DEFAULTS.items():
        space.check_train_config(_cfg(method=method, **values), tmp_path)
    space.check_train_config(_cfg(method="lora", base_model=LARGEST_ALLOWED_MODEL, micro_batch_size=2, max_seq_len=256, max_steps=50), tmp_path)


def test_a_run_on_the_models_own_mistakes_counts_the_answers_its_pairs_are_made_of(on_space):
    """builtin:date-mistakes makes its pairs from the base model's answers before the first step: that writing is work the
    Space's turn must hold, counted from the numbers engine/inference/mistakes.py uses."""
    from engine.inference import mistakes
    from engine.objectives import MISTAKES_DATASET

    fixed = space_limits.table()["fixed"]
    assert fixed["mistakes_dataset"] == MISTAKES_DATASET
    assert fixed["mistakes_answers"] == mistakes.N_PROMPTS * (1 + mistakes.N_SAMPLES) and fixed["mistakes_new_tokens"] == mistakes.MAX_NEW_TOKENS
    lim = space.limits()
    pairs = space_limits.run_cost(_cfg(method="orpo", dataset="builtin:preferences", max_steps=100), lim)
    own = space_limits.run_cost(_cfg(method="orpo", dataset=MISTAKES_DATASET, max_steps=100), lim)
    assert own.generated_tokens - pairs.generated_tokens == mistakes.N_PROMPTS * (1 + mistakes.N_SAMPLES) * mistakes.MAX_NEW_TOKENS
    assert space_limits.work_seconds(own, lim) > space_limits.work_seconds(pairs, lim)


def test_a_distillations_teacher_counts_in_the_spaces_memory(on_space, monkeypatch):
    """The teacher's weights and logits sit beside the student's training: a distillation whose student alone fits the
    memory limit is refused when the two together do not, naming the limit."""
    from engine.estimator.handoff import estimate_train

    cfg = _cfg(method="distill", base_model="builtin:compact-mini", teacher_model=LARGEST_ALLOWED_MODEL, micro_batch_size=4, max_steps=50)
    student = float(estimate_train(cfg, "fp32", on_cpu=True).allocated_gib)
    teacher = space_limits.teacher_gib(cfg)
    assert teacher > 1.5  # 0.5B parameters in fp32 are ~1.8 GiB before its logits
    assert space_limits.teacher_gib(_cfg(method="full")) == 0.0
    monkeypatch.setenv(space.LIMIT_ENV["max_memory_gib"], f"{student + teacher / 2:.3f}")
    with pytest.raises(EngineError, match="GiB of memory"):
        space_limits.check_memory(cfg, space.limits())
    monkeypatch.setenv(space.LIMIT_ENV["max_memory_gib"], f"{student + teacher + 0.1:.3f}")
    space_limits.check_memory(cfg, space.limits())


def _worst(method: str, lim) -> TrainConfig | None:
    """The most a run of `method` can ask under the limits: the longest sequences, the largest micro batch they leave,
    the most processes, answers per prompt and answer length (GRPO), the largest eval share and as many evaluations as
    allowed, and then as many steps as the limits accept (None: not even one step is accepted)."""
    seq = lim.max_seq_len
    micro = max(1, lim.max_batch_tokens // seq)
    extra: dict = {"max_seq_len": seq, "micro_batch_size": micro, "eval_fraction": lim.max_eval_fraction}
    if lim.max_processes > 1:
        extra.update(distributed="ddp", gpus=lim.max_processes)
    if method == "grpo":
        g = lim.max_generations
        extra.update(num_generations=g, max_completion_length=lim.max_completion_length, grad_accum=max(1, -(-g // micro) * micro // micro))
        while (extra["micro_batch_size"] * extra["grad_accum"]) % g:
            extra["grad_accum"] += 1
    if method in ("dpo", "orpo"):
        extra["dataset"] = "builtin:preferences"
    if method == "distill":
        extra["teacher_model"] = "builtin:compact-mini"
    for steps in range(lim.max_steps, 0, -1):
        cfg = _cfg(method=method, max_steps=steps, save_steps=max(1, -(-steps // lim.max_evaluations)), **extra)
        try:
            space_limits.check_run_cost(cfg, lim)
        except EngineError:
            continue
        return cfg
    return None


@pytest.mark.parametrize("method", typing.get_args(Method))
def test_the_worst_run_of_each_method_fits_the_spaces_turn_and_memory(on_space, method):
    lim = space.limits()
    worst = _worst(method, lim)
    assert worst is not None, f"{method}: not even one step fits the limits"
    cost = space_limits.run_cost(worst, lim)
    # time: its whole work at the Space's speed within one turn (the wall time then never has to cut it)
    assert space_limits.work_seconds(cost, lim) <= lim.max_minutes * 60
    assert cost.evaluations <= lim.max_evaluations and cost.processes <= lim.max_processes
    # memory: on the built-in model and on the largest model the size limit lets in, what the estimator predicts is within
    # the Space's memory, or the run is refused before it waits (the memory limit)
    from engine.estimator.handoff import estimate_train

    for model in ("builtin:compact-mini", LARGEST_ALLOWED_MODEL):
        if method == "scratch" and not model.startswith("builtin:"):
            continue
        cfg = dataclasses.replace(worst, base_model=model)
        gib = estimate_train(cfg, "fp32", on_cpu=True).allocated_gib
        if gib <= lim.max_memory_gib:
            space_limits.check_memory(cfg, lim)
        else:
            with pytest.raises(EngineError, match="GiB of memory"):
                space_limits.check_memory(cfg, lim)
        assert lim.max_memory_gib < space_limits.table()["space"]["memory_gib"]


# ---- the waiting line: one run per visitor, and a full line --------------------------------------------------------

def test_one_visitor_has_one_run_in_the_line_and_the_line_has_an_end(on_space, tmp_path):
    import hashlib

    from engine.training import queue as waiting

    jobs = JobManager(tmp_path, queue=True, poll_s=3600)  # the supervisor never starts anything during the test
    busy = tmp_path / "someone-training"
    busy.mkdir()
    (busy / "config.yaml").write_text("method: full\nbase_model: builtin:compact-mini\ndataset: builtin:dates\n")
    jobs.active = lambda: "someone-training"  # another visitor's run trains now
    first = jobs.start(_cfg(run_name="alice-1"), owner="alice")
    assert jobs.status(first).state == "queued"
    before = {p.name for p in tmp_path.iterdir()}
    with pytest.raises(EngineError) as err:
        jobs.start(_cfg(run_name="alice-2"), owner="alice")
    assert "1 run(s) training or waiting" in err.value.render("en") and "COMPACT_LAB_SPACE_MAX_RUNS_PER_VISITOR" in err.value.render("pt-BR")
    assert {p.name for p in tmp_path.iterdir()} == before  # refused before its folder was made
    assert jobs.status(jobs.start(_cfg(run_name="bob-1"), owner="bob")).state == "queued"  # another visitor still joins
    for i in range(space.limits().max_waiting - 2):
        jobs.start(_cfg(run_name=f"v{i}"), owner=f"visitor-{i}")
    assert len(waiting.line(jobs.run_dirs())) == space.limits().max_waiting
    with pytest.raises(EngineError, match="line on this Space is full"):
        jobs.start(_cfg(run_name="late"), owner="late-visitor")
    # alice's own run is hers to resume once it stopped: it does not count against herself
    waiting.leave(tmp_path / first)
    assert hashlib.sha256(b"alice").hexdigest() == (tmp_path / first / "owner").read_text().strip()
