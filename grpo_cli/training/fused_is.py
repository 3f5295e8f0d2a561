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
`tests/training/test_fused_is.py` compares the loss, gradients and ratio with TRL's own path on one generated batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from grpo_cli.training.kept_mass import captured_log_mass, language_model, truncation_of

SWITCH = "GRPO_FUSED_IS"
"""Set to 0 to keep TRL's extra forward (the benchmarks' and tests' reference path)."""
METRICS = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
           "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
           "sampling/importance_sampling_ratio/max")
"""TRL's names for the mismatch metrics, logged as TRL logs them (health.sampler_mismatch reads them)."""
RAW = ("sampling/raw_importance_sampling_ratio/min", "sampling/raw_importance_sampling_ratio/mean",
       "sampling/raw_importance_sampling_ratio/max")
"""grpo's: the per-token ratio before TRL's truncation or mask (TRL's `importance_sampling_ratio/*` is after it, and
per sequence in its default `sequence_mask` mode)."""
FULL_VOCAB = "sampling/full_vocab_importance_sampling_ratio/mean"
"""With truncated sampling: the raw per-token ratio without the renormalisation (TRL 1.16's bias; about the kept
mass)."""
UNRENORMALISED = "sampling/unrenormalised_importance_sampling_ratio/mean"
"""With truncated sampling: TRL's `importance_sampling_ratio/mean` as TRL 1.16 computes it (per sequence in TRL's
default `sequence_mask` mode, where the per-token bias multiplies over the completion)."""
KEPT_MASS = "sampling/kept_mass/mean"
"""With truncated sampling: the mean probability mass top_p/top_k/min_p kept, replayed on the trainer's logits."""


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
    truncation = truncation_of(trainer)

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

    def per_token_logps(model: Any, *args: Any, **kwargs: Any) -> Any:
        if not pending:
            return logps(model, *args, **kwargs)
        inputs = pending.pop()
        log_mass = None
        if truncation is None:
            out = logps(model, *args, **kwargs)
        else:  # the kept mass of vLLM's truncated sampling, from this same forward's hidden states
            width = inputs["completion_ids"].size(1)
            with captured_log_mass(language_model(trainer, model), truncation, width) as found:
                out = logps(model, *args, **kwargs)
            log_mass = found[0]
        mode = "train" if trainer.model.training else "eval"
        inputs["importance_sampling_ratio"] = importance_ratio(trainer, out[0].detach(), inputs, mode, log_mass)
        return out

    trainer._generate_and_score_completions = generate_and_score
    trainer._compute_loss = compute_loss
    trainer._get_per_token_logps_and_entropies = per_token_logps
    return True


def correct_trl_ratio(trainer: Any) -> bool:
    """Where the correction is not fused, TRL computes the ratio in `_generate_and_score_completions`: log its raw
    statistics, and with truncated sampling recompute it over the kept set (TRL's biased metrics replaced).

    The kept mass comes from TRL's own no-grad forward for the old log-probabilities (the first policy forward of
    the call; a PEFT reference forward after it is left alone). Returns whether it wrapped anything.
    """
    if not (getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)):
        return False
    truncation = truncation_of(trainer)
    generate: Callable[..., Any] = trainer._generate_and_score_completions
    logps: Callable[..., Any] = trainer._get_per_token_logps_and_entropies
    found: list[Any] = []
    inside: list[bool] = []

    def per_token_logps(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *args: Any,
                        **kwargs: Any) -> Any:
        if truncation is None or not inside or found or model is not trainer.model:
            return logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        with captured_log_mass(language_model(trainer, model), truncation, logits_to_keep) as mass:
            out = logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        found.append(mass[0])
        return out

    def generate_and_score(*args: Any, **kwargs: Any) -> Any:
        inside.append(True)
        found.clear()
        try:
            output = generate(*args, **kwargs)
        finally:
            inside.clear()
        if "old_per_token_logps" not in output or "sampling_per_token_logps" not in output:
            return output
        mode = "train" if trainer.model.training else "eval"
        if not found:
            mask = output["completion_mask"] * output.get("tool_mask", 1)
            _log_raw(trainer, mode, output["old_per_token_logps"], output["sampling_per_token_logps"], mask.bool(),
                     None)
            return output
        for name in METRICS:  # TRL's, over the whole vocabulary: replaced by the renormalised ones
            trainer._metrics[mode][name].pop()
        output["importance_sampling_ratio"] = importance_ratio(trainer, output["old_per_token_logps"], output, mode,
                                                               found[0])
        return output

    trainer._generate_and_score_completions = generate_and_score
    trainer._get_per_token_logps_and_entropies = per_token_logps
    return True


def importance_ratio(trainer: Any, old: Any, inputs: dict[str, Any], mode: str, log_mass: Any = None) -> Any:
    """TRL's vLLM importance-sampling ratio for `old` log-probabilities, logged with TRL's metrics.

    `log_mass` (log S per token, `kept_mass.py`) renormalises `old` over the tokens vLLM's truncated sampling kept,
    as TRL 1.17 does; the ratio before TRL's truncation or mask is logged too, with and without it.
    """
    import torch

    sampling = inputs["sampling_per_token_logps"]
    mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
    _log_raw(trainer, mode, old, sampling, mask.bool(), log_mass)
    if log_mass is not None:  # TRL 1.16's ratio, what the fix changed: in TRL's own units, after its clip or mask
        unrenormalised, sequence_level = _clipped(trainer, old, sampling, mask)
        flat = unrenormalised.flatten() if sequence_level else unrenormalised[mask.bool()]
        value = flat.mean() if flat.numel() else torch.tensor(float("nan"), device=old.device)
        trainer._metrics[mode][UNRENORMALISED].append(float(trainer.accelerator.gather(value.reshape(1)).nanmean()))
        old = old - log_mass
    ratio, sequence_level = _clipped(trainer, old, sampling, mask)
    _log(trainer, mode, (old - sampling).abs(), mask.bool(), ratio, sequence_level)
    return ratio


def _clipped(trainer: Any, old: Any, sampling: Any, mask: Any) -> tuple[Any, bool]:
    """TRL's ratio after its truncation or mask, per token or per sequence (`vllm_importance_sampling_mode`)."""
    import torch

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
    return ratio, sequence_level


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


def _log_raw(trainer: Any, mode: str, old: Any, sampling: Any, mask: Any, log_mass: Any) -> None:
    """The per-token ratio before TRL's truncation or mask (`RAW`), and with truncated sampling the kept mass and
    the ratio over the whole vocabulary, TRL 1.16's (`FULL_VOCAB`): what `health.sampler_mismatch` reads."""
    import torch

    gather = trainer.accelerator.gather
    scored = mask & ~torch.isnan(sampling)  # tokens vLLM could not score are left out, as TRL does
    full = torch.exp(old - sampling)[scored]
    kept = torch.exp(log_mass)[scored] if log_mass is not None else None
    flat = full / kept if kept is not None else full
    nan = torch.tensor(float("nan"), device=old.device)
    stats: dict[str, tuple[Any, Callable[..., Any]]] = {
        RAW[0]: (flat.min() if flat.numel() else nan, torch.min), RAW[1]: (flat.mean() if flat.numel() else nan,
                                                                            torch.mean),
        RAW[2]: (flat.max() if flat.numel() else nan, torch.max)}
    if kept is not None:
        stats[FULL_VOCAB] = (full.mean() if full.numel() else nan, torch.mean)
        stats[KEPT_MASS] = (kept.mean() if kept.numel() else nan, torch.mean)
    for name, (value, reduce) in stats.items():
        trainer._metrics[mode][name].append(float(_nan_reduce(gather(value.reshape(1)), reduce).item()))


def _nan_reduce(values: Any, reduce: Callable[..., Any]) -> Any:
    """min/max over the processes' values, ignoring NaN (TRL's nanmin/nanmax)."""
    import torch

    kept = values[~torch.isnan(values)]
    return reduce(kept) if kept.numel() else torch.tensor(float("nan"))
