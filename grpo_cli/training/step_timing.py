"""Where a training step's time goes: vLLM's weight sync, generation, rewards, log-probabilities, forward, backward,
optimizer.

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

from grpo_cli.artefacts.time_split import METRIC_PREFIX, PARTS

MAX_BATCHES = 10_000
"""Generation batches whose lengths a run keeps (a few MB at most): enough for the plan's length distribution."""


def step_timer() -> Any:
    """A TrainerCallback that times each part of every optimizer step (transformers is imported only here, so
    `grpo report` can read the split without it)."""
    from transformers import TrainerCallback

    class StepTimer(StepTiming, TrainerCallback):
        pass

    return StepTimer()


class StepTiming:
    """Accumulates the seconds spent in each part during an optimizer step and logs them at its end."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.step_start: float | None = None
        self.optimizer_start: float | None = None
        self.trainer: Any = None
        self.history: list[dict[str, float]] = []
        """Each optimizer step's split, in order (this process's): the run's measured rates
        (artefacts/time_check.py)."""
        self.lengths: list[list[int]] = []
        """Each generation batch's completion lengths in tokens (this process's, at most MAX_BATCHES): transformers
        decodes a batch until its longest completion ends, which the time plan needs (planning/decode_steps.py)."""

    def attach(self, trainer: Any) -> None:
        """Wrap the trainer's generation, reward, scoring, loss and backward calls (instance attributes only)."""
        self.trainer = trainer
        vllm = getattr(trainer, "vllm_generation", None)  # TRL syncs vLLM's weights inside `_generate`
        if vllm is not None:
            self._wrap(vllm, "sync_weights", "weight_sync")
        self._wrap(trainer, "_generate", "generation", minus=("weight_sync",), seen=self._lengths)
        self._wrap(trainer, "_calculate_rewards", "reward")
        self._wrap(trainer, "_generate_and_score_completions", "logprobs",
                   minus=("weight_sync", "generation", "reward"))
        self._wrap(trainer, "compute_loss", "forward")
        self._wrap(trainer.accelerator, "backward", "backward")

    def _lengths(self, result: Any) -> None:
        """Keep the completion lengths of a generation batch (TRL's `_generate` returns the completion ids second;
        anything else is left alone)."""
        ids = result[1] if isinstance(result, tuple) and len(result) > 1 else None
        if isinstance(ids, list) and ids and len(self.lengths) < MAX_BATCHES:
            self.lengths.append([len(c) for c in ids])

    def _wrap(self, owner: Any, name: str, part: str, minus: tuple[str, ...] = (),
              seen: Callable[[Any], None] | None = None) -> None:
        original: Callable[..., Any] | None = getattr(owner, name, None)
        if original is None:  # another TRL version: the part stays 0 and lands in `other`
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            before = {p: self.seconds[p] for p in minus}
            start = time.perf_counter()
            try:
                result = original(*args, **kwargs)
                if seen is not None:
                    seen(result)
                return result
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
        self.history.append(dict(self.seconds))
        buffer = getattr(self.trainer, "_metrics", {}).get("train")
        if buffer is not None:  # TRL averages these per logging window and logs them with its own metrics
            for part, value in self.seconds.items():
                buffer[METRIC_PREFIX + part].append(value)
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.step_start = None

