"""The step time split as a run logged it (`time/<part>` in metrics.jsonl): the parts and the report's table.

training/step_timing.py measures and logs the split; this module is what reads it back, so `grpo report`
and benchmarks need neither transformers nor the trainer.
"""

from __future__ import annotations

from typing import Any

PARTS = ("generation", "reward", "logprobs", "forward", "backward", "optimizer", "other")
"""The split, in the order a step runs. `logprobs` is the rest of scoring (old/reference log-probabilities,
advantages); `other` is the step's time outside every named part (data loading, callbacks, grpo's own logging)."""
METRIC_PREFIX = "time/"


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
