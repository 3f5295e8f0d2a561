"""`launch.vllm.mode: async` (TRL's AsyncGRPOTrainer): what it cannot honour, refused before anything loads,
and the plan line that names its staleness bound and its importance-sampling correction.

TRL 1.16's async trainer is a different trainer from GRPOTrainer: its own config (AsyncGRPOConfig), a fixed
loss (token-level PPO clip against the server's sampled log-probs, no KL), rewards summed with weight 1 in a
spawned scorer, a model it loads itself. A recipe key it would silently ignore is a problem here, not a
surprise in the learning curve. Nothing here imports torch or TRL (the config's fields are read from source).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli import trl_compat
from grpo_cli.errors import Problem
from grpo_cli.recipe.trl_fields import async_grpo_config_names

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

MODE = "launch.vllm.mode"
FIX_MODE = "or use `launch.vllm.mode: server` (the synchronous trainer, which has it)"
# GRPOConfig keys AsyncGRPOConfig lacks, with the values at which the async trainer already does what they ask.
SAME_AS_ASYNC: dict[str, tuple[object, ...]] = {
    "beta": (0, 0.0),  # no KL term, no reference model
    "loss_type": ("dapo",),  # token-level: the loss summed over trained tokens / tokens in the step
    "scale_rewards": ("group", True),  # advantages: (r - group mean) / group std
    "num_iterations": (1,),  # each batch is trained on once
}


def epsilons(recipe: Recipe) -> tuple[float, float]:
    """TRL's clip range (epsilon, epsilon_high; epsilon_high defaults to epsilon)."""
    low = float(recipe.training.get("epsilon") or 0.2)
    high = recipe.training.get("epsilon_high")
    return low, float(high) if high is not None else low


def async_plan(recipe: Recipe, on_cpu: bool) -> str:
    """The plan's (and the run's first lines') account of what async changes: staleness, correction, sync."""
    k = recipe.launch.vllm.max_staleness
    low, high = epsilons(recipe)
    sync = "grpo's CPU weight sync (safetensors over HTTP)" if on_cpu else "TRL's NCCL weight transfer"
    return (f"TRL's AsyncGRPOTrainer: the server samples the next batches while the trainer learns; a completion "
            f"is trained on at most {k} weight sync(s) after it was sampled (older ones are dropped, logged as "
            f"sample/staleness_max); importance-sampling correction: each token's ratio pi_theta / pi_server (the "
            f"server's log-prob of the sampled token) clipped to [{1 - low:g}, {1 + high:g}] (logged as ratio, "
            f"clip_ratio/*); weights sent to the server after every step over {sync}")


def async_problems(recipe: Recipe) -> list[Problem]:
    """What TRL's async trainer cannot do for this recipe (empty unless launch.vllm.mode is async)."""
    if recipe.launch.vllm.mode != "async":
        return []

    names = async_grpo_config_names()
    if not names:
        return [Problem(MODE, f"the installed TRL has no AsyncGRPOTrainer ({trl_compat.async_home()})",
                        f"Install TRL 1.16 (`pip install 'trl{trl_compat.VERIFIED}'`), " + FIX_MODE + ".")]
    found: list[Problem] = []
    for key, value in recipe.training.values().items():
        if key in names or value in SAME_AS_ASYNC.get(key, ()):
            continue
        same = SAME_AS_ASYNC.get(key)
        what = (f"is {value!r}, but TRL's AsyncGRPOTrainer always trains as {key}={same[0]!r}" if same else
                "is not a setting of TRL's AsyncGRPOTrainer (AsyncGRPOConfig), which would ignore it")
        found.append(Problem(f"training.{key}", what, f"Remove it for async mode, {FIX_MODE}."))
    found += _unsupported_sections(recipe)
    return found


def _unsupported_sections(recipe: Recipe) -> list[Problem]:
    """Recipe features grpo does not wire into the async trainer (each named, with the way out)."""
    found: list[Problem] = []
    weights = [e.weight for e in recipe.rewards if e.weight != 1]
    if weights:
        found.append(Problem("rewards[].weight", f"has weight(s) {', '.join(f'{w:g}' for w in weights)}, but TRL's "
                             "async scorer sums rewards with weight 1", f"Use weight 1 for every reward, {FIX_MODE}."))
    zero_std = recipe.health.zero_std
    checks = [
        (recipe.launch.world_size > 1, "launch.num_processes", "async mode runs one training process in grpo"),
        (bool(recipe.tools) or recipe.environment is not None, "tools", "async mode does not run grpo's tools "
         "or environments yet"),
        (recipe.sampling.dynamic is not None or recipe.sampling.skip_zero_advantage, "sampling",
         "`sampling:` filters TRL's synchronous batches; the async trainer has none to filter"),
        (bool(recipe.model.quantization), "model.quantization", "the async trainer loads the model itself, "
         "unquantized"),
        (bool(recipe.eval.every_steps), "eval.every_steps", "evaluation during an async run would generate with "
         "the trainer's packed-attention model"),
        (bool(recipe.callbacks), "callbacks", "recipe callbacks are written against the synchronous trainer"),
        (zero_std.enabled and zero_std.action == "stop", "health.zero_std.action", "is `stop`, but TRL's async "
         "trainer does not log frac_reward_zero_std, so this guard could never fire"),
    ]
    for bad, where, what in checks:
        if bad:
            found.append(Problem(where, what, f"Remove it for async mode, {FIX_MODE}."))
    return found
