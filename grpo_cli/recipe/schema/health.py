"""The `health` section: guards that watch the logged metrics of `grpo train` and warn or stop.

GRPO fails silently (identical rewards in every group, NaN gradients, collapsed entropy,
truncated completions), so every guard is on by default with thresholds a healthy short run
does not reach. A `stop` saves a checkpoint and ends the run with exit code 3.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grpo_cli.recipe.schema.common import Section, omitted_section

Action = Literal["warn", "stop"]


class Guard(Section):
    """What every guard has: an on switch and what happens when it fires."""

    enabled: bool = True
    """Watch this guard's metric (named above); false turns this guard off."""
    action: Action = "warn"
    """`warn` prints and records the event; `stop` also saves a checkpoint and ends the run."""


class ZeroStdSettings(Guard):
    """Groups whose completions all got the same reward carry no learning signal.

    Watches `frac_reward_zero_std`.
    """

    threshold: float = Field(0.95, gt=0.0, le=1.0)
    """Fire when the share of zero-std groups stays at or above this for `window` logging steps."""
    window: int = Field(5, ge=1)
    """Consecutive logging steps the condition must hold."""


class NonFiniteSettings(Guard):
    """NaN or inf in `loss`, `grad_norm` or the total `reward` (missing when no completion could be scored).

    Watches loss, grad norm and the total reward. Note that Trainer's `logging_nan_inf_filter` (on by default)
    hides NaN losses, so a NaN usually shows in the grad norm first.
    """

    window: int = Field(1, ge=1)
    """Fire after this many consecutive logging steps with a non-finite value."""
    action: Action = "stop"
    """Stop by default: after NaN weights or a batch no reward could score, later steps are wasted."""


class UnscoredRewardSettings(Guard):
    """One reward function scored no completion (it returned None or NaN for every row).

    Watches each `rewards/<name>/mean`. Multi-task rewards return None for rows of other tasks, which is fine
    for a while; a reward that never scores anything is a bug.
    """

    window: int = Field(5, ge=1)
    """Fire when a reward's mean is missing for this many consecutive logging steps."""


class EntropySettings(Guard):
    """Token entropy near zero: the policy always samples the same answer and stops exploring.

    Watches `entropy` (nats per completion token).
    """

    threshold: float = Field(0.02, ge=0.0)
    """Fire when entropy stays below this floor for `window` logging steps."""
    window: int = Field(3, ge=1)
    """Consecutive logging steps the condition must hold."""


class ClippedSettings(Guard):
    """Completions cut at `training.max_completion_length` get rewards for unfinished answers.

    Watches `completions/clipped_ratio`.
    """

    threshold: float = Field(0.95, gt=0.0, le=1.0)
    """Fire when the share of truncated completions stays at or above this for `window` logging steps."""
    window: int = Field(3, ge=1)
    """Consecutive logging steps the condition must hold."""


class FlatRewardSettings(Guard):
    """The total reward has not moved over a long window: the run has converged or is not learning.

    Watches `reward`.
    """

    threshold: float = Field(0.01, ge=0.0)
    """Fire when max - min of the reward over the last `window` logging steps is below this."""
    window: int = Field(20, ge=2)
    """Logging steps compared (never fires before this many)."""


class ToolFailureSettings(Guard):
    """Most tool calls fail (bad arguments, exceptions, timeouts): the model learns from error messages.

    Watches `tools/failure_frequency` (only logged when the recipe has tools or an environment).
    """

    threshold: float = Field(0.5, gt=0.0, le=1.0)
    """Fire when the share of failed tool calls stays at or above this for `window` logging steps."""
    window: int = Field(5, ge=1)
    """Consecutive logging steps the condition must hold."""


class NoToolCallsSettings(Guard):
    """The model never calls a tool: the tools train nothing (often a chat template or parsing problem).

    Watches `tools/call_frequency` (only logged when the recipe has tools or an environment).
    """

    window: int = Field(10, ge=1)
    """Fire when no completion called a tool for this many consecutive logging steps."""


class RewardGamingSettings(Guard):
    """The training reward rises while the task metric falls: a reward being gamed (or a proxy that stopped
    measuring the task).

    Watches the task metric (`task/<eval|suite>/<eval.metric>`, logged only with `eval.every_steps`) against the
    mean training `reward` of the logs before each evaluation.
    """

    task_drop: float = Field(0.05, gt=0.0)
    """Fire when the task metric is at least this far below its best evaluation so far ..."""
    reward_rise: float = Field(0.05, gt=0.0)
    """... while the mean training reward since the previous evaluation is at least this far above the mean before
    the best one."""
    window: int = Field(1, ge=1)
    """Consecutive evaluations the condition must hold."""


class SamplerMismatchSettings(Guard):
    """vLLM samples from weights other than the trainer's: a weight sync that silently failed, or a dtype gap.

    Watches what TRL logs with vLLM and its importance-sampling correction (on by default): the mean gap between the
    trainer's and vLLM's log-probabilities of the sampled tokens (`sampling/sampling_logp_difference/mean`) and the
    mean importance-sampling ratio (`sampling/importance_sampling_ratio/mean`). Only installed with
    `launch.vllm.mode` colocate or server.
    """

    threshold: float = Field(0.05, gt=0.0)
    """Fire when the mean log-probability gap (nats per completion token) stays at or above this ..."""
    ratio_drift: float = Field(0.1, gt=0.0)
    """... or the mean importance-sampling ratio stays this far from 1 (either way), for `window` logging steps."""
    window: int = Field(2, ge=1)
    """Consecutive logging steps the condition must hold."""


class BottleneckSettings(Section):
    """At the end of a run, the part of a step that took most of its time, with what to try (from `time/*`)."""

    enabled: bool = True
    """Print and record the advice (never stops a run: it is given after the last step)."""
    threshold: float = Field(0.5, gt=0.0, le=1.0)
    """Advise when one part (generation, reward, log-probabilities, forward, backward, optimizer, other) took at
    least this share of the mean step."""


class HealthSection(Section):
    """Guards that watch each training log; events go to OUTPUT_DIR/health.jsonl and the console."""

    enabled: bool = True
    """Master switch; false turns every guard off."""
    zero_std: ZeroStdSettings = omitted_section()
    """Most groups got identical rewards (`frac_reward_zero_std` near 1)."""
    nonfinite: NonFiniteSettings = omitted_section()
    """NaN/inf in loss, grad norm or total reward."""
    unscored_reward: UnscoredRewardSettings = omitted_section()
    """A reward function that scores no completion."""
    entropy: EntropySettings = omitted_section()
    """Entropy collapse."""
    clipped: ClippedSettings = omitted_section()
    """Nearly every completion hits the length limit."""
    flat_reward: FlatRewardSettings = omitted_section()
    """The reward stopped moving."""
    tool_failures: ToolFailureSettings = omitted_section()
    """Most tool calls fail."""
    no_tool_calls: NoToolCallsSettings = omitted_section()
    """The model never calls a tool."""
    reward_gaming: RewardGamingSettings = omitted_section()
    """The training reward rises while the task metric falls (needs `eval.every_steps`)."""
    sampler_mismatch: SamplerMismatchSettings = omitted_section()
    """vLLM's log-probabilities drift from the trainer's (with `launch.vllm.mode` colocate or server)."""
    bottleneck: BottleneckSettings = omitted_section()
    """End-of-run advice on the part of a step that dominated its time."""
