"""An environment that owns both the task and the reward (recipes/environment-demo.yaml).

There is no dataset: `reset()` serves each rollout its 3-digit sum, the model may call `add`, and
`get_reward()` scores the rollout from what the environment saw: 1 when `add` was called with the two
numbers it served, else 0. TRL calls `reset` once per rollout and `get_reward` once per finished rollout.
"""

import random


class SumDesk:
    """A desk that hands out sums and checks the adding done at it."""

    _built = 0  # instances so far: each draws its own sequence, so every rollout gets its own sums

    def __init__(self, seed: int = 0) -> None:
        SumDesk._built += 1
        self._rng = random.Random(seed * 100_003 + SumDesk._built)
        self._operands = (0, 0)
        self._calls: list[tuple[int, int]] = []

    def reset(self, **kwargs) -> str:
        """Start a rollout: a new sum, appended to the (empty) user message."""
        self._operands = (self._rng.randint(100, 999), self._rng.randint(100, 999))
        self._calls = []
        return f"{self._operands[0]}+{self._operands[1]}"

    def add(self, a: int, b: int) -> int:
        """Add two integers exactly.

        Args:
            a: The first number.
            b: The second number.
        """
        self._calls.append((a, b))
        return a + b

    def get_reward(self) -> float:
        """1.0 when `add` was called with the two numbers served (in either order), else 0.0."""
        a, b = self._operands
        return 1.0 if (a, b) in self._calls or (b, a) in self._calls else 0.0
