"""The preference and reward methods (DPO, ORPO, KTO, GRPO) by name, and the syntax of GRPO's reward list.

Below engine/config.py (which validates TrainConfig's `method` and `reward` with these) and everything that trains or
estimates them: the names are data every layer shares, the trainers and the rewards live in engine/training/.
"""

from __future__ import annotations

from .errors import ConfigError

# The objectives that learn from preference pairs or from rewards instead of from answers; each trains the weights
# that `tuning` names (LoRA, QLoRA or every weight), where the supervised methods name them in `method` itself.
PREFERENCE_METHODS = ("dpo", "orpo", "kto")  # KTO: answers labelled good or bad, one at a time (pairs are unpaired)
REWARD_METHODS = ("grpo",)
OBJECTIVE_METHODS = PREFERENCE_METHODS + REWARD_METHODS
# The built-in reward functions of GRPO, chosen by name (never code from the user); engine/training/rewards.py
# implements them (a test checks that the two lists agree).
REWARD_NAMES = ("dates", "date_parts", "format", "length")
# The built-in dataset of preference pairs made when a run starts, from its starting model's own mistakes on the date
# task (engine/training/mistake_data.py); not a file, so the data layer never reads it by this name.
MISTAKES_DATASET = "builtin:date-mistakes"


def parse_rewards(spec: str, field: str = "reward") -> list[tuple[str, float]]:
    """`dates`, `dates, format:0.5` or `dates:1, length:0.2` as [(name, weight)]; ConfigError naming `field` when a
    name is not a built-in reward, a weight is not a number, or a name repeats."""
    out: list[tuple[str, float]] = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight = part.partition(":")
        name = name.strip().lower()
        if name not in REWARD_NAMES:
            raise ConfigError.of(field, spec, "reward_name", "TrainConfig", names=", ".join(REWARD_NAMES))
        try:
            value = float(weight) if weight.strip() else 1.0
        except ValueError:
            raise ConfigError.of(field, spec, "reward_weight", "TrainConfig") from None
        if value != value or abs(value) > 100:
            raise ConfigError.of(field, spec, "reward_weight", "TrainConfig")
        if any(n == name for n, _ in out):
            raise ConfigError.of(field, spec, "reward_twice", "TrainConfig", name=name)
        out.append((name, value))
    if not out:
        raise ConfigError.of(field, spec, "reward_name", "TrainConfig", names=", ".join(REWARD_NAMES))
    return out


__all__ = ["MISTAKES_DATASET", "OBJECTIVE_METHODS", "PREFERENCE_METHODS", "REWARD_METHODS", "REWARD_NAMES", "parse_rewards"]
