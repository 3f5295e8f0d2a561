"""The step time split as a run logged it (`time/<part>` in metrics.jsonl): the parts and the report's table.

training/step_timing.py measures and logs the split; this module is what reads it back, so `grpo report`
and benchmarks need neither transformers nor the trainer.
"""

from __future__ import annotations

from typing import Any

PARTS = ("weight_sync", "generation", "reward", "logprobs", "forward", "backward", "optimizer", "other")
"""The split, in the order a step runs. `weight_sync` is vLLM taking the trainer's weights (0 without vLLM;
runs logged before it existed lack it); `logprobs` is the rest of scoring (old/reference log-probabilities,
advantages); `other` is the step's time outside every named part (data loading, callbacks, grpo's own logging)."""
METRIC_PREFIX = "time/"


def time_split(rows: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(part, mean seconds per step, share of the step) over logged rows that carry the split; empty if none."""
    sums = dict.fromkeys(PARTS, 0.0)
    count = 0
    for row in rows:
        values = [row.get(METRIC_PREFIX + p, 0.0 if p == "weight_sync" else None) for p in PARTS]
        if all(isinstance(v, int | float) for v in values):
            count += 1
            for part, value in zip(PARTS, values, strict=True):
                sums[part] += float(value)  # type: ignore[arg-type]
    if not count:
        return []
    total = sum(sums.values()) or 1.0
    return [(p, sums[p] / count, sums[p] / total) for p in PARTS]


ADVICE = {
    "weight_sync": "sync vLLM less often (a larger training.gradient_accumulation_steps with steps_per_generation "
                   "to match), or on a CPU with a small model generate with transformers (launch.vllm.mode: off); "
                   "`grpo validate` prints the estimate for both",
    "generation": "sample with vLLM (launch.vllm.mode: colocate or server), shorten training.max_completion_length, "
                  "generate fewer completions (training.num_generations) or skip groups that teach nothing "
                  "(sampling.dynamic with sampling.skip_zero_advantage; docs/sampling.md)",
    "reward": "make the reward cheaper: a process pool (the reward's `parallel`), a remote sandbox for `code`, a "
              "smaller reward model, or cache repeated answers",
    "logprobs": "drop what needs extra log-probability passes: beta: 0 (no reference model), num_iterations: 1 and "
                "steps_per_generation equal to gradient_accumulation_steps (no old log-probabilities)",
    "forward": "train fewer weights (model.lora), shorten completions, or leave gradient checkpointing off where "
               "memory allows (it repeats the forward)",
    "backward": "train fewer weights (model.lora), shorten completions, or leave gradient checkpointing off where "
                "memory allows; with sampling.skip_zero_advantage, zero-advantage completions cost none",
    "optimizer": "train fewer weights (model.lora) or use a fused optimizer on GPU (training.optim: adamw_torch_fused)",
    "other": "log less often (training.logging_steps), check your own callbacks, and keep data loading light",
}
"""What to try when a part dominates the step, for the end-of-run advice (`health.bottleneck`)."""


def bottleneck_advice(rows: list[dict[str, Any]], threshold: float = 0.5) -> str | None:
    """'generation was 55 % of each step (1.20 of 2.18 s): try ...' when one part took at least `threshold` of
    the mean step; None when no part did, or the run logged no split."""
    split = time_split(rows)
    if not split:
        return None
    part, seconds, share = max(split, key=lambda s: s[2])
    if share < threshold:
        return None
    total = sum(s for _, s, _ in split)
    return f"{part} was {share:.0%} of each step ({seconds:.2f} of {total:.2f} s): {ADVICE[part]}."


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
    advice = bottleneck_advice(rows)
    return [*lines, "", *([f"**Bottleneck**: {advice}", ""] if advice else [])]
