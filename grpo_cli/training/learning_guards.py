"""Guards that read whether learning works (the learning signal), beside the per-log guards of `health_guards.py`.

- `reward_gaming`: the task metric (`eval.every_steps`) falls from its best while the training reward rises, the
  shape of a reward being gamed; a HealthGuard like the others (warn or stop, health.jsonl, the report).
- `sampler_mismatch`: with vLLM, the trainer's log-probabilities of the sampled tokens drift from vLLM's (TRL's
  `sampling/sampling_logp_difference/mean` and `sampling/importance_sampling_ratio/mean`), the shape of a weight
  sync that silently failed; a HealthGuard on each training log.
- `bottleneck`: at the end of a run, the part of a step (`time/*`, from `step_timing.py`) that took most of its
  time, and what to try; printed, and written in report.md's time split (`artefacts/time_split.py`), never a
  stop and never a health event (a healthy run has a largest part too).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from grpo_cli.artefacts.time_split import bottleneck_advice
from grpo_cli.training.health_guards import HealthEvents, HealthGuard, Observation, finite, fmt, health_callbacks
from grpo_cli.training.task_metric import metric_name

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe


class RewardGamingGuard(HealthGuard):
    """Each evaluation of the task metric against the mean training reward of the logs since the previous one."""

    name = "reward_gaming"

    def __init__(self, settings: Any, recipe: Recipe, events: HealthEvents) -> None:
        super().__init__(settings, recipe, events)
        self.metric = metric_name(recipe)
        self.sign = 1.0 if recipe.eval.greater_is_better else -1.0
        self.rewards: list[float] = []  # training rewards since the last evaluation
        self.evals: list[tuple[int, float, float | None]] = []  # (step, task value, mean reward before it)
        self.step = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.step = int(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> Any:
        if logs and "reward" in logs and finite(logs["reward"]):
            self.rewards.append(float(logs["reward"]))
        if logs and self.metric in logs:
            return super().on_log(args, state, control, logs={**logs, "reward": logs.get("reward", 0.0)}, **kw)
        return None

    def observe(self, logs: dict[str, Any]) -> Observation | None:
        value = logs.get(self.metric)
        if not finite(value):
            return None
        reward = sum(self.rewards) / len(self.rewards) if self.rewards else None
        self.rewards = []
        self.evals.append((self.step, float(value), reward))
        best, base = self.best()
        drop = self.sign * (best[1] - float(value))
        rise = reward - base if reward is not None and base is not None else None
        bad = drop >= self.settings.task_drop and rise is not None and rise >= self.settings.reward_rise
        return Observation(self.metric, float(value), bad)

    def best(self) -> tuple[tuple[int, float, float | None], float | None]:
        """The best evaluation so far and the training reward at it: the mean of the logs before it, or for the
        baseline before training (no logs yet), of the first logs after it."""
        index = max(range(len(self.evals)), key=lambda i: self.sign * self.evals[i][1])
        base = next((e[2] for e in self.evals[index:] if e[2] is not None), None)
        return self.evals[index], base

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        step, value, reward = self.evals[-1]
        best, base = self.best()
        return (f"{self.metric} fell from {best[1]:.3f} (step {best[0]}) to {value:.3f} (step {step}) while the "
                f"training reward rose from {base or 0.0:.3f} to {reward or 0.0:.3f} (mean of the training logs "
                "around each evaluation): the reward is being gamed, or measures something other than the task",
                f"read the completions of the last steps (`grpo samples {self.events.path.parent}`) for what earns "
                "the reward; weight the outcome reward up or the shaping rewards down; score the task in the "
                f"reward itself; keep the best model (kept in {self.events.path.parent}/best) and stop here")


GAP = "sampling/sampling_logp_difference/mean"
RATIO = "sampling/importance_sampling_ratio/mean"
RAW = "sampling/raw_importance_sampling_ratio/"  # grpo's: before TRL's clip or mask (training/fused_is.py)
FULL_VOCAB = "sampling/full_vocab_importance_sampling_ratio/mean"  # with top_p/top_k/min_p: before renormalising


class SamplerMismatchGuard(HealthGuard):
    """vLLM and the trainer disagree on the sampled tokens: the mean log-prob gap or the mean IS ratio drifts."""

    name = "sampler_mismatch"

    def observe(self, logs: dict[str, Any]) -> Observation | None:
        name = RAW + "mean" if finite(logs.get(RAW + "mean")) else RATIO  # the raw ratio: a clip hides drift
        gap, ratio = logs.get(GAP), logs.get(name)
        if finite(gap) and gap >= self.settings.threshold:
            return Observation(GAP, float(gap), True)
        if finite(ratio) and abs(ratio - 1.0) >= self.settings.ratio_drift:
            return Observation(name, float(ratio), True)
        if finite(gap) or finite(ratio):
            return Observation(GAP, float(gap) if finite(gap) else None, False)
        return None  # not a vLLM run, or TRL's importance-sampling correction is off

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        gap, top, ratio = (fmt(v) if finite(v) else "not logged" for v in
                           (logs.get(GAP), logs.get("sampling/sampling_logp_difference/max"), logs.get(RATIO)))
        if finite(logs.get(RAW + "mean")):
            ratio += " after TRL's clip; raw min/mean/max " + "/".join(
                fmt(logs.get(RAW + k)) if finite(logs.get(RAW + k)) else "?" for k in ("min", "mean", "max"))
        if finite(logs.get(FULL_VOCAB)):
            ratio += f", {fmt(logs[FULL_VOCAB])} over the whole vocabulary before renormalising to the kept tokens"
        check = ("check the vLLM server's log for weight-sync errors and that it serves "
                 f"{self.recipe.model.name_or_path}" if self.recipe.launch.vllm.mode == "server"
                 else "check that nothing replaced TRL's weight sync (VLLMGeneration.sync_weights)")
        return (f"for {len(seen)} logging steps the trainer's log-probabilities of the tokens vLLM sampled differed "
                f"from vLLM's by {gap} nats per token on average (max {top}; thresholds {self.settings.threshold} "
                f"and a mean importance-sampling ratio within {self.settings.ratio_drift} of 1, now {ratio}): vLLM "
                "is sampling from other weights than the trainer's. A healthy run stays near 0.005 (vLLM in bf16) or "
                "below 0.001 (both in float32); a gap that grows as training goes on is a weight sync that silently "
                "failed, so every step learns from a stale policy's samples",
                f"{check}; run `grpo validate RECIPE` for the dtype vLLM samples in; if the gap is constant from "
                "step 1, it is the dtype (raise health.sampler_mismatch.threshold), not a sync bug")


class BottleneckAdvice(TrainerCallback):
    """At the end of training: the part of a step that took at least `threshold` of it, and what to try."""

    def __init__(self, recipe: Recipe, console: Console | None) -> None:
        self.threshold = recipe.health.bottleneck.threshold
        self.console = console
        self.advice = ""

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.advice = bottleneck_advice(list(state.log_history), self.threshold) or ""
        if self.advice and state.is_world_process_zero and self.console is not None:
            self.console.print(f"[bold]where the time went[/]: {self.advice}", soft_wrap=True, highlight=False)


def _events(guards: list[TrainerCallback], output_dir: str | Path, console: Console | None) -> HealthEvents:
    """The event log the guards already share (one health.jsonl writer), or a new one."""
    first = next((g for g in guards if isinstance(g, HealthGuard)), None)
    return first.events if first is not None else HealthEvents(Path(output_dir), console)


def all_health_callbacks(recipe: Recipe, output_dir: str | Path,
                         console: Console | None = None) -> list[TrainerCallback]:
    """`health_guards.py`'s guards, then the reward-gaming guard (with `eval.every_steps`), the sampler-mismatch guard
    (with vLLM) and the bottleneck advice."""
    guards = health_callbacks(recipe, output_dir, console=console)
    health = recipe.health
    if not health.enabled:
        return guards
    if health.reward_gaming.enabled and recipe.eval.every_steps:
        guards.append(RewardGamingGuard(health.reward_gaming, recipe, _events(guards, output_dir, console)))
    if health.sampler_mismatch.enabled and recipe.launch.vllm.mode != "off":
        guards.append(SamplerMismatchGuard(health.sampler_mismatch, recipe, _events(guards, output_dir, console)))
    if health.bottleneck.enabled:
        guards.append(BottleneckAdvice(recipe, console))
    return guards
