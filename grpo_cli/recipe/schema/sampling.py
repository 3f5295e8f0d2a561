"""The `sampling` section: which generated groups a training step learns from.

GRPO learns only from groups whose completions got different rewards; a group with equal rewards has zero
advantage everywhere and teaches nothing. Both settings are off by default: a recipe without them trains
exactly as TRL does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from grpo_cli.recipe.schema.common import Section, not_a_bool

MAX_ROUNDS = 100
"""The most generation rounds a batch may take (`sampling.dynamic.max_rounds`)."""
MAX_OVERSAMPLE = 8.0
"""The largest `sampling.dynamic.oversample` factor: 8x a step's generation, every step."""
DEFAULT_OVERSAMPLE = 2.0
"""The factor `strategy: oversample` uses when `oversample` is not set."""


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
    a step's generation) stops a typo from looping for hours on a reward that never varies. Not with
    `strategy: oversample`, which always generates one round."""
    strategy: Literal["refill", "oversample"] = "refill"
    """`refill` (default, DAPO's): generate the batch, drop flat groups, generate further prompts for the missing
    groups, up to `max_rounds` rounds; the cost follows the flat share (about z / (1 - z) more generation). `oversample`
    (prime-rl's): generate `oversample` times the batch's prompts in one generation call, keep the groups with
    spread up to the batch's size and never generate a second round; the cost is fixed (k times the generation,
    every step) and a batch whose kept groups fall short is filled with zero-advantage filler. Choose it where a
    second round costs more than the extra prompts (a remote vLLM server, whose every call waits for the slowest
    completion); `grpo validate` prices both from the last run or calibration."""
    oversample: float | None = Field(None, gt=1.0, le=MAX_OVERSAMPLE, allow_inf_nan=False)
    """With `strategy: oversample`: generate ceil(k x the batch's prompts) groups per step (k > 1, at most 8; unset:
    2). It costs k times a step's generation (and its scoring), every step, whether groups were flat or not; it fills
    a batch whose share of flat groups z stays below 1 - 1/k (2: up to 50 % flat, 4: up to 75 %)."""

    @property
    def factor(self) -> float | None:
        """The oversampling factor in force (None with `strategy: refill`)."""
        if self.strategy != "oversample":
            return None
        return self.oversample if self.oversample is not None else DEFAULT_OVERSAMPLE

    @field_validator("max_rounds", "oversample", mode="before")
    @classmethod
    def _no_bool(cls, value: Any, info: ValidationInfo) -> Any:
        """`true` is neither a number of rounds nor a factor (pydantic would read it as 1)."""
        return not_a_bool(value, f"a number of generation rounds (1 to {MAX_ROUNDS})" if info.field_name ==
                          "max_rounds" else f"a factor above 1 and at most {MAX_OVERSAMPLE:g} (e.g. 2)")

    @model_validator(mode="after")
    def _strategy_keys(self) -> DynamicSamplingSection:
        """A key the chosen strategy never reads is a mistake, not a silent no-op."""
        if self.strategy == "refill" and self.oversample is not None:
            raise ValueError(f"oversample: {self.oversample:g} is read only with strategy: oversample (the refill "
                             "strategy generates further prompts after each round instead): add `strategy: "
                             "oversample`, or remove `oversample`")
        if self.strategy == "oversample" and "max_rounds" in self.model_fields_set:
            raise ValueError(f"max_rounds: {self.max_rounds} does not apply to strategy: oversample, which generates "
                             "one round only (`oversample` times the prompts): remove `max_rounds`, or use strategy: "
                             "refill")
        return self


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
    share_prompt_forward: bool = False
    """Run each group's prompt through the loss's forward and backward once instead of once per completion: the
    completions run on a copy of its KV cache, and the copies' gradients add up in the one prompt pass. The same
    update up to floating-point order (log-probabilities agree to about 1e-5); the forward and backward take about
    2.6x less time where prompts are long against completions (SmolLM2 recipe: 60-token prompts, 32-token
    completions). On one process (several run TRL's forward); not with images, gradient checkpointing, LoRA
    dropout or async mode (`grpo validate` refuses them); a batch without repeated prompts trains as TRL does."""
    compiled_decode: bool | None = None
    """A static KV cache and compiled decode steps when transformers generates (TRL's `cache_implementation:
    static`, with one cache size for every round so decoding compiles once). Unset: on for CUDA where it applies,
    off on the CPU (transformers compiles decode only on GPUs). `true` forces the static cache (on the CPU without
    compiling), `false` keeps TRL's dynamic cache. Never with vLLM, tools, images, dynamic sampling, continuous
    batching, quantized or sharded weights, or a `cache_implementation` of the recipe's own: `grpo validate`'s
    "generation path" line says which applies and why."""
