"""Health guards: trainer callbacks that watch each training log and warn or stop.

GRPO's common failures are silent: identical rewards in every group, NaN gradients, entropy
collapse, every completion truncated. Each guard looks at the metrics TRL logs, and when its
condition holds for `window` logging steps it records an event (OUTPUT_DIR/health.jsonl and
the console); with `action: stop` it also saves a checkpoint and ends the run, leaving a
`.reason` that `grpo train` reports (exit code 3).

TRL 1.16 averages each metric over the logging window ignoring NaN, and logs None when every
value was NaN: a reward function returning NaN (or None) for every row shows up as a missing
(null) `rewards/<name>/mean`, and as a missing `reward` when it is the only reward.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeGuard

from transformers import TrainerCallback

from grpo_cli import runs

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe

HEALTH_FILE = runs.HEALTH


@dataclass
class Observation:
    """One guard's reading of one training log."""

    metric: str
    value: float | None  # None: the metric was logged as missing (TRL's all-NaN average)
    bad: bool


def is_train_log(logs: dict[str, Any] | None) -> bool:
    """True for per-step training logs (not eval logs, not the end-of-training summary)."""
    if not logs or any(k.startswith("eval_") for k in logs):
        return False
    return "loss" in logs or "reward" in logs


def finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: float | None) -> str:
    """A metric value for messages: 3 decimals, or what made it unusable."""
    if value is None:
        return "missing"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.3f}"


def _json_value(value: float | None) -> float | str | None:
    """NaN and inf are not JSON: write them as strings so any reader can load health.jsonl."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class HealthEvents:
    """Where guard events go: OUTPUT_DIR/health.jsonl and the console (main process only)."""

    def __init__(self, output_dir: Path, console: Console | None = None) -> None:
        self.path = Path(output_dir) / HEALTH_FILE
        self.console = console
        self.start = time.time()

    def record(self, *, step: int, guard: str, action: str, metric: str, observed: float | None,
               settings: Any, message: str, main: bool) -> None:
        if not main:
            return
        event = {"step": step, "time": round(time.time() - self.start, 3), "guard": guard, "action": action,
                 "metric": metric, "observed": _json_value(observed),
                 "threshold": getattr(settings, "threshold", None), "window": getattr(settings, "window", None),
                 "message": message}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")
        console = self.console
        if console is None:
            from rich.console import Console

            console = self.console = Console(stderr=True, highlight=False, emoji=False)
        style = "bold red" if action == "stop" else "yellow"
        console.print(f"[{style}]health {action}[/] [bold]{guard}[/] at step {step}: ", end="")
        console.print(message, markup=False, soft_wrap=True)


class HealthGuard(TrainerCallback):
    """Base guard: fires once when its condition has held for `window` logs, re-arms when it clears."""

    name: ClassVar[str] = ""

    def __init__(self, settings: Any, recipe: Recipe, events: HealthEvents) -> None:
        self.settings = settings
        self.recipe = recipe
        self.training = recipe.training  # the typed GRPOConfig values its messages quote
        self.events = events
        self.reason = ""
        self.streak: deque[Observation] = deque(maxlen=self.needed)
        self.fired = False

    @property
    def needed(self) -> int:
        """Consecutive bad logs before firing."""
        return int(self.settings.window)

    def observe(self, logs: dict[str, Any]) -> Observation | None:
        """Read this guard's metric from a training log; None when it was not logged."""
        raise NotImplementedError

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        """(what was seen, what to try) for the message."""
        raise NotImplementedError

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> Any:
        if not is_train_log(logs) or self.reason:
            return None
        assert logs is not None
        obs = self.observe(logs)
        if obs is None:
            return None
        if not obs.bad:
            self.streak.clear()
            self.fired = False
            return None
        self.streak.append(obs)
        if len(self.streak) < self.needed or self.fired:
            return None
        self.fired = True
        seen, advice = self.explain(list(self.streak), logs)
        message = f"{seen}. Try: {advice}."
        action = self.settings.action
        step = int(state.global_step)
        self.events.record(step=step, guard=self.name, action=action, metric=obs.metric, observed=obs.value,
                           settings=self.settings, message=message, main=bool(state.is_world_process_zero))
        if action != "stop":
            return None
        out = Path(args.output_dir)
        saved = out / f"{runs.CHECKPOINT_PREFIX}{step}"
        command = shlex.join(["grpo", "train", str(self.recipe.source or "RECIPE"), "-o", str(out), "--resume"])
        self.reason = (f"Health guard `{self.name}` stopped the run at step {step}: {message} Saved "
                       f"{saved}; continue it with `{command}` after changing the recipe, or set "
                       f"health.{self.name}.action=warn.")
        control.should_save = True
        control.should_training_stop = True
        return control


class MetricGuard(HealthGuard):
    """A guard on one logged metric: a log counts as bad when `trips(value)` holds (by default: at or above
    the guard's threshold); a log without a finite value, or one `counts` rejects, is skipped."""

    metric: ClassVar[str] = ""

    def observe(self, logs: dict[str, Any]) -> Observation | None:
        value = logs.get(self.metric)
        if not finite(value) or not self.counts(logs):
            return None
        return Observation(self.metric, float(value), self.trips(float(value)))

    def counts(self, logs: dict[str, Any]) -> bool:
        """Whether this log says anything about the guard's condition."""
        return True

    def trips(self, value: float) -> bool:
        return value >= self.settings.threshold


class ZeroStdGuard(MetricGuard):
    name, metric = "zero_std", "frac_reward_zero_std"

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        g, temp = self.training.num_generations, self.training.temperature
        return (f"frac_reward_zero_std stayed at or above {self.settings.threshold} for {len(seen)} logging steps "
                f"(last {fmt(seen[-1].value)}, reward {fmt(logs.get('reward'))}): nearly every group of {g} "
                "completions got identical rewards, so advantages are zero and nothing is learned",
                f"raise training.temperature (now {temp}) or training.num_generations (now {g}); soften a binary "
                "reward with partial credit; use prompts the model sometimes solves. If the reward is already at "
                "its maximum, the task is learned: stop or use harder prompts")


class NonFiniteGuard(HealthGuard):
    name = "nonfinite"

    def observe(self, logs: dict[str, Any]) -> Observation | None:
        seen_any = False
        for key in ("loss", "grad_norm", "reward"):
            if key not in logs:
                continue
            value = logs[key]
            if value is None and key != "reward":
                continue  # only a missing reward means something (nothing could be scored)
            seen_any = True
            if not finite(value):
                return Observation(key, value, True)
        return Observation("loss", logs.get("loss"), False) if seen_any else None

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        obs = seen[-1]
        if obs.metric == "reward":
            what = ("the total reward is missing: every reward function returned None or NaN for every completion"
                    if obs.value is None else f"the total reward is {fmt(obs.value)}: a reward function returned inf")
            means = ", ".join(f"{k} {fmt(v)}" for k, v in logs.items() if k.startswith("rewards/")
                              and k.endswith("/mean"))
            return (f"{what} ({means})" if means else what,
                    "make each reward function return a finite float per completion (None only for rows it does "
                    "not apply to); check it gets the dataset columns it reads (data.keep_columns)")
        lr, clip = self.training.learning_rate, self.training.max_grad_norm
        return (f"{obs.metric} is {fmt(obs.value)}: the update diverged and the weights may now hold NaN",
                f"lower training.learning_rate (now {lr}); keep gradient clipping on (training.max_grad_norm, now "
                f"{clip}); prefer bf16 over fp16; check reward functions for huge or non-finite values")


class UnscoredRewardGuard(HealthGuard):
    name = "unscored_reward"

    def __init__(self, settings: Any, recipe: Recipe, events: HealthEvents) -> None:
        super().__init__(settings, recipe, events)
        self.missing: dict[str, int] = {}

    @property
    def needed(self) -> int:
        return 1  # the per-reward streaks below carry the window

    def observe(self, logs: dict[str, Any]) -> Observation | None:
        # GRPOTrainer logs `rewards/<name>/mean`; TRL's async trainer `rewards/<name>` (None when nothing scored)
        means = {k: v for k, v in logs.items()
                 if k.startswith("rewards/") and (k.endswith("/mean") or k.count("/") == 1)}
        if not means:
            return None
        for key, value in means.items():
            self.missing[key] = 0 if finite(value) else self.missing.get(key, 0) + 1
        worst = max(self.missing, key=lambda k: self.missing[k])
        return Observation(worst, means.get(worst), self.missing[worst] >= self.settings.window)

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        key = seen[-1].metric
        name = key.split("/")[1]
        return (f"{key} was missing for {self.missing[key]} logging steps in a row: reward `{name}` returned None "
                "or NaN for every completion, so it contributes nothing",
                f"fix `{name}` to return a float per completion (None only for rows it does not apply to) and "
                "check it receives the columns it reads (data.keep_columns)")


class EntropyGuard(MetricGuard):
    name, metric = "entropy", "entropy"

    def trips(self, value: float) -> bool:
        return value < self.settings.threshold

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        return (f"entropy stayed below {self.settings.threshold} for {len(seen)} logging steps "
                f"(last {fmt(seen[-1].value)}): the policy samples nearly the same completion every time",
                f"raise training.temperature (now {self.training.temperature}); lower training.learning_rate (now "
                f"{self.training.learning_rate}); add a KL penalty (training.beta > 0, now {self.training.beta})")


class ClippedGuard(MetricGuard):
    name, metric = "clipped", "completions/clipped_ratio"

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        length = self.training.max_completion_length
        return (f"{fmt(seen[-1].value)} of completions hit training.max_completion_length ({length}) for "
                f"{len(seen)} logging steps: rewards are judging unfinished answers",
                "raise training.max_completion_length; add a length or format reward that pays for finishing; "
                "set training.mask_truncated_completions=true")


class FlatRewardGuard(MetricGuard):
    name, metric = "flat_reward", "reward"

    def __init__(self, settings: Any, recipe: Recipe, events: HealthEvents) -> None:
        super().__init__(settings, recipe, events)
        self.values: deque[float] = deque(maxlen=int(settings.window))

    @property
    def needed(self) -> int:
        return 1  # the reward window below carries it

    def trips(self, value: float) -> bool:
        self.values.append(value)
        full = len(self.values) == self.values.maxlen
        return full and max(self.values) - min(self.values) < self.settings.threshold

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        lo, hi = min(self.values), max(self.values)
        return (f"the reward stayed between {lo:.3f} and {hi:.3f} over the last {len(self.values)} logging steps",
                "if this is the reward's maximum the task is learned; otherwise raise training.learning_rate (now "
                f"{self.training.learning_rate}), check frac_reward_zero_std (groups need differing rewards), or make "
                "the reward denser (partial credit)")


class ToolFailureGuard(MetricGuard):
    name, metric = "tool_failures", "tools/failure_frequency"

    def counts(self, logs: dict[str, Any]) -> bool:
        calls = logs.get("tools/call_frequency")
        return finite(calls) and bool(calls)  # no calls this window: nothing failed or succeeded

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        return (f"{fmt(seen[-1].value)} of tool calls failed for {len(seen)} logging steps (at or above "
                f"{self.settings.threshold}): the model mostly sees error messages instead of results",
                "run `grpo check-tools RECIPE` to see each tool's errors and timeouts; make tools accept the "
                "arguments the model sends (types in the signature, clear `Args:` docs); raise a tool's `timeout`")


class NoToolCallsGuard(MetricGuard):
    name, metric = "no_tool_calls", "tools/call_frequency"

    def trips(self, value: float) -> bool:
        return value == 0

    def explain(self, seen: list[Observation], logs: dict[str, Any]) -> tuple[str, str]:
        return (f"no completion called a tool for {len(seen)} logging steps (tools/call_frequency 0)",
                "check that the model was trained for tool calling and that its calls parse (`grpo check-tools "
                "RECIPE` prints the schema it sees and parses a sample); mention the tools in the prompt; raise "
                "training.max_completion_length if calls are cut off")


GUARDS: tuple[type[HealthGuard], ...] = (NonFiniteGuard, ZeroStdGuard, UnscoredRewardGuard, EntropyGuard,
                                         ClippedGuard, FlatRewardGuard, ToolFailureGuard, NoToolCallsGuard)


def health_callbacks(recipe: Recipe, output_dir: str | Path, console: Console | None = None) -> list[TrainerCallback]:
    """The enabled guards of `recipe.health`, sharing one event log in `output_dir`."""
    health = recipe.health
    if not health.enabled:
        return []
    events = HealthEvents(Path(output_dir), console)
    return [cls(getattr(health, cls.name), recipe, events) for cls in GUARDS if getattr(health, cls.name).enabled]
