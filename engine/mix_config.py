"""The settings of a mix of adapters (issue 34): MixConfig, the Fine-tune panel's "Mix adapters" and `python -m engine mix`
(engine/training/mix.py does the work). Beside engine/config.py, which lists it among the form classes, in the same layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError
from .fields import opt, validate
from .refs import is_folder_safe_name

# --- Adapters mixed (issue 34): engine/training/mix.py ----------------------------------------------

MixCombination = Literal["linear", "ties", "dare_linear", "dare_ties", "svd", "cat"]
MIX_DENSITY_METHODS = ("ties", "dare_linear", "dare_ties")  # the methods that keep only `density` of each adapter's weights
MIX_EQUAL_RANK_METHODS = ("linear", "ties", "dare_linear", "dare_ties")  # they add the adapters' A and B matrices entry by entry


def mix_list(text: str) -> list[str]:
    """The comma-separated items of a MixConfig field (parents, weights), stripped, empty ones left out."""
    return [part.strip() for part in str(text or "").split(",") if part.strip()]


@dataclass
class MixConfig:
    """Two or more finished LoRA runs on the same base combined into a new run with peft's weighted-adapter methods (the
    Fine-tune panel's "Mix adapters", `python -m engine mix`). Saved as the mixed run's mix.yaml."""

    parents: str = opt("", "The finished LoRA runs to combine, two or more, separated by commas.", label="Runs to mix",
                       details="Run names under the runs folder. They must be LoRA or QLoRA runs of the same base model.")
    combination: MixCombination = opt(
        "ties", "How the adapters are combined: TIES and DARE keep each run's strongest changes, linear adds them, SVD also mixes ranks.",
        label="Mix method", details="peft's LoraModel.add_weighted_adapter combination_type.",
        choices_help={
            "linear": "Weighted sum of the adapters' A and B matrices (equal ranks); fast, a rough approximation.",
            "ties": "TIES: keeps the largest `density` of each adapter's values, elects a sign per value, averages those that agree.",
            "dare_linear": "DARE: drops values at random (keeps `density`), rescales the rest, then adds them.",
            "dare_ties": "DARE's random drop, then TIES' sign election.",
            "svd": "Adds the full weight changes, then a truncated SVD back to a LoRA of `svd_rank` (runs of different ranks too).",
            "cat": "Concatenates the adapters (rank = the sum of the ranks): exactly the weighted sum of their changes.",
        },
    )
    weights: str = opt("", "How much of each run goes into the mix, in the same order, e.g. 1,0.5; empty gives each 1.", label="Weights",
                       details="One number per run, from -10 to 10 (a negative weight subtracts that run's change).")
    density: float = opt(0.5, "For TIES and DARE: the share of each adapter's values that is kept; 0.5 keeps half.", min=0.01, max=1.0,
                         step=0.01, label="Density")
    svd_rank: int = opt(0, "For SVD: the rank of the mixed adapter; 0 uses the largest rank of the runs.", min=0, max=1024, step=1,
                        label="SVD rank")
    score: bool = opt(True, "Scores the date task on the base, each run and the mix, to compare them side by side.",
                      label="Score the date task")
    run_name: str = opt("", "A name for the mixed run's folder; leave empty to name it after the method and the time.", label="Run name")

    def __post_init__(self) -> None:
        validate(self)
        names = mix_list(self.parents)
        if len(names) < 2 or len(set(names)) != len(names) or not all(is_folder_safe_name(n) for n in names):
            raise ConfigError("parents", self.parents, allowed_key="mix.allowed.parents", owner="MixConfig")
        self.parents = ",".join(names)
        if self.weights.strip():
            try:
                values = [float(w) for w in mix_list(self.weights)]
            except ValueError:
                values = []
            if len(values) != len(names) or not all(-10 <= w <= 10 for w in values) or not any(values):
                raise ConfigError("weights", self.weights, allowed_key="mix.allowed.weights", owner="MixConfig", n=len(names))
            self.weights = ",".join(f"{w:g}" for w in values)
        name = self.run_name.strip()
        if name and (not is_folder_safe_name(name) or name in names):
            raise ConfigError.of("run_name", self.run_name, "folder_name", "MixConfig")
        self.run_name = name

    @property
    def parent_list(self) -> list[str]:
        return mix_list(self.parents)

    @property
    def weight_list(self) -> list[float]:
        """One weight per parent (1 each when none was given)."""
        return [float(w) for w in mix_list(self.weights)] or [1.0] * len(self.parent_list)
