"""The `sampling` section: which generated groups a training step learns from.

GRPO learns only from groups whose completions got different rewards; a group with equal rewards has zero
advantage everywhere and teaches nothing. Both settings are off by default: a recipe without them trains
exactly as TRL does.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from grpo_cli.recipe.schema.common import Section, not_a_bool

MAX_ROUNDS = 100
"""The most generation rounds a batch may take (`sampling.dynamic.max_rounds`)."""


class DynamicSamplingSection(Section):
    """DAPO's dynamic sampling: drop the groups whose chosen reward is (nearly) the same for every completion and
    fill the batch with groups generated from further prompts.

    Each generation batch is generated and scored as usual; groups whose `metric` has a standard deviation at or
    below `min_std` are dropped whole, and further prompts (drawn from the training split with the run's seed) are
    generated until the batch is full again or `max_rounds` generation rounds were used. A batch still short after
    the last round is filled with dropped groups whose advantages are set to zero, so they move nothing (with
    `sampling.skip_zero_advantage` they cost no forward/backward either), and the share is logged as
    `dynamic_sampling/zero_std_trained`. Also logged per step: `dynamic_sampling/dropped_groups`,
    `dynamic_sampling/rounds` and `dynamic_sampling/generated_groups`.
    """

    metric: str | None = None
    """The reward whose spread decides (a reward label of this recipe, or `reward` for the weighted total). Default:
    the reward named `accuracy`, else `eval.metric` when it names a reward, else the recipe's only reward. Prefer
    the outcome reward to the total: with shaping rewards an all-wrong group still has spread in the total and would
    pass the filter with a gradient that teaches format, not the task."""
    min_std: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    """Drop a group when the population std of `metric` over its completions is at or below this (0: only groups
    where every completion got the same value). Population, not the sample std TRL logs as `reward_std`: a group of
    0/1 scores has a population std of at most 0.5 (half of them right), so `grpo validate` refuses a min_std that
    a built-in reward's range makes unreachable, and training warns when batches keep ending with every group
    dropped."""
    max_rounds: int = Field(3, ge=1, le=MAX_ROUNDS)
    """Generation rounds per batch at most, the first included (1: filter only, never generate more), up to 100.
    Each extra round generates only as many groups as are still missing, scaled up by the share kept so far, and
    a step whose rounds run long says so on the console. verl (`max_num_gen_batches`) and NeMo-RL
    (`dynamic_sampling_max_gen_batches`) default to 10 and set no maximum; grpo's bound of 100 rounds (up to 100x
    a step's generation) stops a typo from looping for hours on a reward that never varies."""


    @field_validator("max_rounds", mode="before")
    @classmethod
    def _rounds(cls, value: Any) -> Any:
        """`true` is not a number of rounds (pydantic would read it as 1)."""
        return not_a_bool(value, f"a number of generation rounds (1 to {MAX_ROUNDS})")


class SamplingSection(Section):
    """What a training step generates and learns from (off by default)."""

    dynamic: DynamicSamplingSection | None = None
    """DAPO dynamic sampling: over-generate and keep only groups with a learning signal (see below); costs extra
    generation, which `grpo validate` estimates."""
    skip_zero_advantage: bool = False
    """Leave completions whose advantage is exactly 0 out of the loss's forward and backward. Only where their
    gradient is exactly zero: `beta: 0`, no entropy bonus (`entropy_coef: 0`, no adaptive entropy), no entropy
    mask (`top_entropy_quantile: 1`), no off-policy mask, no MoE router loss, and a loss_type whose normalisation
    grpo rescales exactly (grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo); `grpo validate` refuses the others. The
    update is the same; per-step logs of entropy and clip ratios then cover the completions trained on."""
    compiled_decode: bool | None = None
    """A static KV cache and compiled decode steps when transformers generates (TRL's `cache_implementation:
    static`, with one cache size for every round so decoding compiles once). Unset: on for CUDA where it applies,
    off on the CPU (transformers compiles decode only on GPUs). `true` forces the static cache (on the CPU without
    compiling), `false` keeps TRL's dynamic cache. Never with vLLM, tools, images, dynamic sampling, continuous
    batching, quantized or sharded weights, or a `cache_implementation` of the recipe's own: `grpo validate`'s
    "generation path" line says which applies and why."""
