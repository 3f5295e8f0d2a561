"""Where a training step's time goes: generation, rewards, log-probabilities, forward, backward, optimizer.

TRL times a whole step (`step_time`); on a CPU, or with a large group, the question a user has is which part to
shrink (fewer/shorter completions, vLLM, a cheaper reward, gradient checkpointing). The timer wraps the trainer's
own methods on the instance (no subclass, nothing changed in what they do) and hands TRL one number per part per
optimizer step through the trainer's metric buffer, so they are averaged and logged with every other metric as
`time/<part>` (seconds) in metrics.jsonl, and `grpo report` can show the split.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

PARTS = ("generation", "reward", "logprobs", "forward", "backward", "optimizer", "other")
"""The split, in the order a step runs. `logprobs` is the rest of scoring (old/reference log-probabilities,
advantages); `other` is the step's time outside every named part (data loading, callbacks, grpo's own logging)."""
METRIC_PREFIX = "time/"


def step_timer() -> Any:
    """A TrainerCallback that times each part of every optimizer step (transformers is imported only here, so
    `grpo report` can read the split without it)."""
    from transformers import TrainerCallback

    class StepTimer(_Timing, TrainerCallback):
        pass

    return StepTimer()


class _Timing:
    """Accumulates the seconds spent in each part during an optimizer step and logs them at its end."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.step_start: float | None = None
        self.optimizer_start: float | None = None
        self.trainer: Any = None

    def attach(self, trainer: Any) -> None:
        """Wrap the trainer's generation, reward, scoring, loss and backward calls (instance attributes only)."""
        self.trainer = trainer
        self._wrap(trainer, "_generate", "generation")
        self._wrap(trainer, "_calculate_rewards", "reward")
        self._wrap(trainer, "_generate_and_score_completions", "logprobs", minus=("generation", "reward"))
        self._wrap(trainer, "compute_loss", "forward")
        self._wrap(trainer.accelerator, "backward", "backward")

    def _wrap(self, owner: Any, name: str, part: str, minus: tuple[str, ...] = ()) -> None:
        original: Callable[..., Any] | None = getattr(owner, name, None)
        if original is None:  # another TRL version: the part stays 0 and lands in `other`
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            before = {p: self.seconds[p] for p in minus}
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                inner = sum(self.seconds[p] - before[p] for p in minus)
                self.seconds[part] += time.perf_counter() - start - inner

        setattr(owner, name, timed)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.step_start is None:
            self.step_start = time.perf_counter()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.optimizer_start = time.perf_counter()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.optimizer_start is not None:
            self.seconds["optimizer"] += time.perf_counter() - self.optimizer_start
            self.optimizer_start = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.step_start is None or self.trainer is None:
            return
        total = time.perf_counter() - self.step_start
        named = sum(v for k, v in self.seconds.items() if k != "other")
        self.seconds["other"] = max(0.0, total - named)
        buffer = getattr(self.trainer, "_metrics", {}).get("train")
        if buffer is not None:  # TRL averages these per logging window and logs them with its own metrics
            for part, value in self.seconds.items():
                buffer[METRIC_PREFIX + part].append(value)
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.step_start = None


def time_split(rows: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(part, mean seconds per step, share of the step) over logged rows that carry the split; empty if none."""
    sums = dict.fromkeys(PARTS, 0.0)
    count = 0
    for row in rows:
        values = [row.get(METRIC_PREFIX + p) for p in PARTS]
        if all(isinstance(v, int | float) for v in values):
            count += 1
            for part, value in zip(PARTS, values, strict=True):
                sums[part] += float(value)  # type: ignore[arg-type]
    if not count:
        return []
    total = sum(sums.values()) or 1.0
    return [(p, sums[p] / count, sums[p] / total) for p in PARTS]


def time_split_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The report's "Where the time goes" section (nothing when the run logged no split)."""
    split = time_split(rows)
    if not split:
        return []
    total = sum(seconds for _, seconds, _ in split)
    lines = ["## Where the time goes", "", f"Mean seconds per optimizer step ({total:.2f} s in all), over "
             f"{sum(1 for r in rows if isinstance(r.get(METRIC_PREFIX + 'other'), int | float))} logged windows.",
             "", "| part | s / step | share |", "|---|---:|---:|"]
    lines += [f"| {part} | {seconds:.3f} | {share:.0%} |" for part, seconds, share in split]
    return [*lines, ""]
