"""vLLM's importance-sampling correction from the loss forward: one forward pass fewer per step, the same update.

With vLLM, TRL corrects for the gap between the sampler's and the trainer's log-probabilities with a ratio
`exp(old - sampling)` per token (`vllm_importance_sampling_correction`, on by default). To get `old` it runs an
extra no-grad forward of the whole generation batch right after generating. When the steps are aligned
(`num_iterations` 1 and gradient accumulation a multiple of `steps_per_generation`) no optimizer step happens
between that forward and the loss forward, so `old` is exactly what the loss forward computes again with the
same weights (TRL itself uses `per_token_logps.detach()` as `old` in that case without vLLM). On the SmolLM2 recipe
that extra forward was 3.3 s of a 17 s step on 2 cores. grpo takes `old` from the loss forward instead: the ratio,
its truncation or mask and TRL's `sampling/*` metrics are computed there, as TRL computes them (with
`sampling.skip_zero_advantage` the metrics cover the completions that are trained on).
`tests/test_fused_is.py` compares the loss, gradients and ratio with TRL's own path on one generated batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

SWITCH = "GRPO_FUSED_IS"
"""Set to 0 to keep TRL's extra forward (the benchmarks' and tests' reference path)."""
METRICS = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
           "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
           "sampling/importance_sampling_ratio/max")
"""TRL's names for the mismatch metrics, logged as TRL logs them (health.sampler_mismatch reads them)."""


def fusable(trainer: Any) -> bool:
    """Whether TRL's extra log-probability forward serves only the vLLM correction (then it can be fused)."""
    args = trainer.args
    generate_every = args.steps_per_generation * getattr(trainer, "num_iterations", 1)
    return bool(getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)
                and args.gradient_accumulation_steps % generate_every == 0)


def fuse_importance_sampling(trainer: Any) -> bool:
    """Wrap the trainer (instance attributes, like step_timing) so the correction comes from the loss forward.

    Returns whether it did: nothing is wrapped unless `fusable`. Generation runs with TRL's correction switched
    off (so no extra forward); the loss marks its inputs, and the first log-probabilities computed for them (the
    loss forward's own) give the ratio before TRL's loss reads `inputs["importance_sampling_ratio"]`.
    """
    if not fusable(trainer) or os.environ.get(SWITCH) == "0":
        return False
    generate: Callable[..., Any] = trainer._generate_and_score_completions
    logps: Callable[..., Any] = trainer._get_per_token_logps_and_entropies
    compute: Callable[..., Any] = trainer._compute_loss
    pending: list[dict[str, Any]] = []

    def generate_and_score(*args: Any, **kwargs: Any) -> Any:
        trainer.vllm_importance_sampling_correction = False
        try:
            return generate(*args, **kwargs)
        finally:
            trainer.vllm_importance_sampling_correction = True

    def compute_loss(model: Any, inputs: dict[str, Any]) -> Any:
        if "importance_sampling_ratio" in inputs or inputs.get("sampling_per_token_logps") is None:
            return compute(model, inputs)  # TRL's own path (or nothing to correct against)
        pending.append(inputs)
        try:
            return compute(model, inputs)
        finally:
            pending.clear()

    def per_token_logps(*args: Any, **kwargs: Any) -> Any:
        out = logps(*args, **kwargs)
        if pending:
            inputs = pending.pop()
            mode = "train" if trainer.model.training else "eval"
            inputs["importance_sampling_ratio"] = importance_ratio(trainer, out[0].detach(), inputs, mode)
        return out

    trainer._generate_and_score_completions = generate_and_score
    trainer._compute_loss = compute_loss
    trainer._get_per_token_logps_and_entropies = per_token_logps
    return True


def importance_ratio(trainer: Any, old: Any, inputs: dict[str, Any], mode: str) -> Any:
    """TRL's vLLM importance-sampling ratio for `old` log-probabilities, logged with TRL's metrics."""
    import torch

    sampling = inputs["sampling_per_token_logps"]
    mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
    sequence_level = trainer.vllm_importance_sampling_mode in ("sequence_mask", "sequence_truncate")
    ratio = torch.exp(diff.sum(dim=-1, keepdim=True) if sequence_level else diff)
    low, high = trainer.vllm_importance_sampling_clip_min, trainer.vllm_importance_sampling_clip_max
    if trainer.vllm_importance_sampling_mode.endswith("_truncate"):
        ratio = torch.clamp(ratio, min=low, max=high)
    elif trainer.vllm_importance_sampling_mode.endswith("_mask"):
        low = -math.inf if low is None else low
        high = math.inf if high is None else high
        ratio = ratio.masked_fill((ratio < low) | (ratio > high), value=0.0)
    else:
        raise ValueError(f"unknown vllm_importance_sampling_mode {trainer.vllm_importance_sampling_mode!r}")
    _log(trainer, mode, (old - sampling).abs(), mask.bool(), ratio, sequence_level)
    return ratio


def _log(trainer: Any, mode: str, delta: Any, mask: Any, ratio: Any, sequence_level: bool) -> None:
    """TRL's `sampling/*` metrics for one batch (NaN deltas, tokens vLLM could not score, left out)."""
    import torch

    gather = trainer.accelerator.gather
    delta = delta[mask & ~torch.isnan(delta)]
    zero = torch.zeros((), device=ratio.device)
    flat = ratio.flatten() if sequence_level else ratio[mask]
    stats = [delta.mean() if delta.numel() else zero, delta.max() if delta.numel() else zero,
             flat.min() if flat.numel() else zero, flat.mean() if flat.numel() else zero,
             flat.max() if flat.numel() else zero]
    values = [gather(stats[0]).mean(), gather(stats[1]).max(), _nan_reduce(gather(stats[2]), torch.min),
              gather(stats[3]).nanmean(), _nan_reduce(gather(stats[4]), torch.max)]
    for name, value in zip(METRICS, values, strict=True):
        trainer._metrics[mode][name].append(float(value.item()))


def _nan_reduce(values: Any, reduce: Callable[..., Any]) -> Any:
    """min/max over the processes' values, ignoring NaN (TRL's nanmin/nanmax)."""
    import torch

    kept = values[~torch.isnan(values)]
    return reduce(kept) if kept.numel() else torch.tensor(float("nan"))
