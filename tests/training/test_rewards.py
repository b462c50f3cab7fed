"""GRPO's built-in rewards (by name only), their weights, the recorder behind the run's sampled answers, and the
config fields of dpo/orpo/grpo with the errors that name them."""

from __future__ import annotations

import pytest

from engine.config import TrainConfig
from engine.errors import ConfigError
from engine.objectives import REWARD_NAMES, parse_rewards
from engine.training.rewards import BUILTIN_REWARDS, RewardRecorder, date_parts_reward, dates_reward, format_reward, length_reward


def test_every_reward_name_the_config_accepts_is_implemented():
    assert tuple(BUILTIN_REWARDS) == REWARD_NAMES
    assert all(fn.__name__ == name for name, fn in BUILTIN_REWARDS.items())  # trl logs rewards/<name>/mean


def test_dates_reward_is_the_date_tasks_own_scoring():
    assert dates_reward("2023-09-05", "2023-09-05") == 1.0
    assert dates_reward(" 2023-09-05.\nmore text", "2023-09-05") == 1.0  # first line, trailing punctuation: as the task scores
    assert dates_reward("2023-05-09", "2023-09-05") == 0.0 and dates_reward("", "2023-09-05") == 0.0


def test_partial_format_and_length_rewards():
    assert date_parts_reward("2023-09-05", "2023-09-05") == 1.0
    assert date_parts_reward("2023-05-09", "2023-09-05") == pytest.approx(1 / 3)  # day and month swapped: only the year
    assert date_parts_reward("05/09/2023", "2023-09-05") == 0.0
    assert format_reward("2023-09-05") == 1.0 and format_reward("2023-13-05") == 0.0 and format_reward("05/09/2023") == 0.0
    assert length_reward("2023-09-05") == 0.0 and length_reward("x" * 24) == 0.0
    assert length_reward("2023-09-05\n" + "y" * 200) == -1.0 and -1.0 < length_reward("2023-09-05\nabc") < 0.0


def test_weights_and_the_recorder_keep_the_latest_answers():
    rec = RewardRecorder("dates, format:0.5")
    assert rec.weights == [1.0, 0.5] and [f.__name__ for f in rec.functions] == ["dates", "format"]
    prompts, completions, answers = ["p1", "p2", "p3"], ["2023-09-05", "2023-05-09", "nope"], ["2023-09-05"] * 3
    values = [f(prompts=prompts, completions=completions, answer=answers) for f in rec.functions]
    assert values == [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    samples = rec.samples()
    assert [s["reward"] for s in samples] == [1.5, 0.5, 0.0] and samples[0]["completion"] == "2023-09-05" and samples[0]["answer"] == "2023-09-05"
    conversational = BUILTIN_REWARDS["format"](prompts=["p"], completions=[[{"role": "assistant", "content": "2023-09-05"}]])
    assert conversational == [1.0]


@pytest.mark.parametrize(("spec", "allowed"), [("python:import os", "reward_name"), ("dates:abc", "reward_weight"),
                                               ("dates, dates", "reward_twice"), ("", "reward_name"), ("dates:1000", "reward_weight")])
def test_bad_reward_lists_name_the_field(spec, allowed):
    with pytest.raises(ConfigError) as err:
        TrainConfig(method="grpo", reward=spec, micro_batch_size=8, num_generations=8)
    assert err.value.field == "reward" and err.value.allowed_key == f"message.allowed.{allowed}"
    assert "Recompensas (grpo)" in err.value.render("pt-BR")


def test_objective_fields_are_checked():
    cfg = TrainConfig(method="grpo", reward=" Dates : 1 ,format:0.5", micro_batch_size=16, num_generations=8)
    assert cfg.reward == "dates, format:0.5" and parse_rewards(cfg.reward) == [("dates", 1.0), ("format", 0.5)]
    with pytest.raises(ConfigError) as err:
        TrainConfig(method="grpo", micro_batch_size=12, num_generations=8)
    assert err.value.field == "num_generations" and "12" in str(err.value)
    assert TrainConfig(method="grpo", micro_batch_size=4, grad_accum=2, num_generations=8).num_generations == 8  # 4 x 2 answers a step
    with pytest.raises(ConfigError) as err:
        TrainConfig(method="grpo", micro_batch_size=8, num_generations=8, early_stopping_patience=2)
    assert err.value.field == "early_stopping_patience"
    with pytest.raises(ConfigError):
        TrainConfig(method="dpo", beta=0.0)


@pytest.mark.parametrize(("method", "tuning", "weights", "quant"), [("dpo", "lora", "lora", "none"), ("orpo", "qlora", "qlora", "4bit"),
                                                                     ("grpo", "full", "full", "none"), ("distill", "qlora", "full", "none"),
                                                                     ("qlora", "full", "qlora", "4bit")])
def test_tuning_decides_the_weights_of_the_objective_methods_only(method, tuning, weights, quant):
    cfg = TrainConfig(method=method, tuning=tuning, teacher_model="builtin:compact-mini", micro_batch_size=8, num_generations=8)
    assert cfg.weights == weights and cfg.quant.mode == quant


def test_full_objective_refuses_a_quantized_base():
    with pytest.raises(ConfigError) as err:
        from engine.fields import from_dict

        from_dict(TrainConfig, {"method": "dpo", "tuning": "full", "quant": {"mode": "8bit"}})
    assert err.value.field == "quant.mode"
