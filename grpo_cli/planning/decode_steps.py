"""How many tokens transformers decodes per generation batch: until the batch's longest completion ends.

`generate` stops a batch when every completion in it has ended (or at max_completion_length), so a larger batch
decodes longer: the longest of 24 sampled completions runs past the longest of 16. A run records the mean
longest completion of its generation batches, the share cut at the limit and the lengths of the others
(`RateRow.decode_steps`, `clipped`, `lengths`). The plan draws a batch's completions independently from those:
cut at the limit with the clipped share (at a higher limit, a cut completion is taken to run to the new limit),
else one of the measured lengths (cut at a lower limit), and takes the expected longest of the batch. The
measured decode steps are scaled by its ratio to the expected longest at the row's batch, so the row's own
recipe plans exactly what it measured, and completions of one prompt, which are alike (drawing independently
overstates how the longest grows), are partly accounted for by the measured figure. The batch is the
completions of one step across processes: TRL generates a step's completions in one batch (steps_per_generation
= gradient_accumulation_steps, its default), and every process waits for the longest in the gather after it.
vLLM schedules completions one by one, so its rows keep the token-limit scaling. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_cli.step_rates import RateRow, StepShape

LENGTH_POINTS = 32
"""Equally likely lengths a row keeps of the completions that ended before the limit (their quantiles)."""


def length_points(lengths: list[int], limit: int) -> tuple[float, list[float]]:
    """The share of `lengths` cut at `limit` and up to LENGTH_POINTS quantiles of the others (evenly spaced
    order statistics, the shortest and longest included)."""
    ended = sorted(v for v in lengths if v < limit)
    clipped = 1.0 - len(ended) / len(lengths) if lengths else 0.0
    if len(ended) <= LENGTH_POINTS:
        return clipped, [float(v) for v in ended]
    last = len(ended) - 1
    return clipped, [float(ended[round(i * last / (LENGTH_POINTS - 1))]) for i in range(LENGTH_POINTS)]


def expected_longest(clipped: float, lengths: list[float], limit: int, batch: int) -> float:
    """The expected longest of `batch` completions drawn independently: cut at `limit` with probability
    `clipped`, else one of `lengths` (equally likely, cut at `limit` too): sum of value x (P(max <= value) -
    P(max < value))."""
    ended = (1.0 - clipped) / len(lengths) if lengths else 0.0
    points = sorted([(min(v, float(limit)), ended) for v in lengths] + [(float(limit), clipped if lengths else 1.0)])
    expected, below = 0.0, 0.0
    for value, weight in points:
        above = min(1.0, below + weight)
        expected += value * (above ** batch - below ** batch)
        below = above
    return expected


@dataclass(frozen=True)
class DecodeSteps:
    """The planned step's decode steps per generation batch against the row's."""

    factor: float
    """Planned decode steps over the row's measured ones: what the row's generation seconds are scaled by."""
    planned: float
    measured: float

    def how(self, row: RateRow, shape: StepShape) -> str:
        """What the plan assumed, in words."""
        cut = f"{row.clipped:.0%} cut at the limit" if row.clipped else "none cut at the limit"
        return (f"decodes ~{self.planned:.3g} tokens a generation batch, the expected longest of "
                f"{shape.completions * shape.processes} completions ({cut} in that run, the others as long as "
                f"measured; {self.measured:.3g} measured at {row.shape.completions * row.shape.processes})")


def decode_steps(row: RateRow, shape: StepShape) -> DecodeSteps | None:
    """The decode steps of `shape`'s generation batches from the row's completion lengths; None when the row has
    none (recorded before them, or by vLLM): the plan then scales by max_completion_length."""
    if row.decode_steps is None or row.clipped is None or row.decode_steps <= 0 or shape.backend != "transformers":
        return None
    if row.clipped < 1.0 and not row.lengths:
        return None
    r = row.shape
    at_row = expected_longest(row.clipped, row.lengths, r.completion_tokens, r.completions * r.processes)
    planned = expected_longest(row.clipped, row.lengths, shape.completion_tokens,
                               shape.completions * shape.processes)
    factor = min(planned / max(at_row, 1e-9), shape.completion_tokens / row.decode_steps)
    return DecodeSteps(factor=factor, planned=row.decode_steps * factor, measured=row.decode_steps)
