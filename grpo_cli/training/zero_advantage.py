"""Completions with advantage exactly 0 skip the loss's forward and backward, with the same update.

With `beta: 0`, no entropy bonus or mask, no off-policy mask and no router loss, TRL's per-token loss of a
completion is its advantage times a factor (`-min(r * A, clip(r) * A)`, `-r * A * logp`, ...), so a completion
whose advantage is exactly 0 adds exactly 0 to the loss and to every gradient. The wrapper of `compute_loss`
(on the instance, like `step_timing`) gives TRL only the other rows and rescales the loss by what the loss type's
normaliser would have counted for the whole micro-batch, so the gradient is the one TRL computes: dapo and cispo
divide by `num_items_in_batch` (kept in the inputs), grpo, sapo, luspo and dr_grpo by the number of completions,
bnpo by the number of completion tokens. A micro-batch with no such row gives a zero loss that still touches
every trainable parameter, so the optimizer steps exactly as it would on zero gradients.
`tests/training/test_zero_advantage.py` trains one step both ways on the bundled model and compares the parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.planning.sampling_choice import SKIP_LOSS_TYPES

ROW_SCALED = ("grpo", "sapo", "luspo", "dr_grpo")
METRIC = "zero_advantage/skipped"


def skip_problems(trainer: Any) -> list[str]:
    """Why this trainer's loss may give a zero-advantage completion a gradient (empty: the skip is exact)."""
    checks = [
        (getattr(trainer, "beta", None) != 0.0, "beta is not 0"),
        (getattr(trainer, "_entropy_bonus_enabled", True), "the entropy bonus is on"),
        (getattr(trainer, "aux_loss_enabled", True), "the MoE router loss is on"),
        (getattr(trainer, "top_entropy_quantile", 0.0) != 1.0, "top_entropy_quantile is below 1"),
        (getattr(trainer, "off_policy_mask_threshold", 0.0) is not None, "the off-policy mask is on"),
        (getattr(trainer, "loss_type", None) not in SKIP_LOSS_TYPES,
         f"loss_type {getattr(trainer, 'loss_type', None)!r}"),
        (not hasattr(trainer, "compute_loss"), "GRPOTrainer has no compute_loss"),
    ]
    return [why for bad, why in checks if bad]


def attach_zero_advantage_skip(trainer: Any) -> None:
    """Wrap `trainer.compute_loss` so rows with advantage exactly 0 are left out (refused where inexact)."""
    problems = skip_problems(trainer)
    if problems:
        raise GrpoError(f"zero-advantage completions would still move the model here ({'; '.join(problems)})",
                        where="sampling.skip_zero_advantage",
                        fix="Remove `sampling.skip_zero_advantage`, or change what is named (`grpo validate` "
                            "lists it).")
    original: Callable[..., Any] = trainer.compute_loss

    def compute_loss(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if not model.training:
            return original(model, inputs, *args, **kwargs)
        advantages = inputs["advantages"]
        live = advantages != 0 if advantages.dim() == 1 else (advantages != 0).any(dim=1)
        passed = _same_count_everywhere(trainer, live)
        count, total = int(passed.sum()), int(passed.numel())
        trainer._metrics["train"][METRIC].append((total - count) / max(total, 1))
        if count == total:
            return original(model, inputs, *args, **kwargs)
        if count == 0:  # zero gradient for every trainable parameter, as the full loss would give
            return sum((p.sum() * 0.0 for p in model.parameters() if p.requires_grad), advantages.new_zeros(()))
        rows = passed.nonzero().squeeze(1)
        subset = {k: _rows(v, rows, total) for k, v in inputs.items()}
        return original(model, subset, *args, **kwargs) * _scale(trainer.loss_type, inputs, passed)

    trainer.compute_loss = compute_loss


def _same_count_everywhere(trainer: Any, live: Any) -> Any:
    """The rows to give TRL's loss: the live ones, and on several processes as many on each as the process with
    the most has (TRL's loss gathers per-completion metrics, which needs one size on every process), topped up with
    zero-advantage rows, which add exactly 0. No process has a live row: none, on every process alike, so none runs
    the forward and DDP reduces nothing (every gradient is 0 everywhere)."""
    if trainer.accelerator.num_processes == 1:
        return live
    most = int(trainer.accelerator.gather(live.sum().reshape(1)).max())
    passed = live.clone()
    passed[(~live).nonzero().squeeze(1)[:most - int(live.sum())]] = True
    return passed


def _rows(value: Any, rows: Any, total: int) -> Any:
    """A per-completion value restricted to `rows`; anything else (num_items_in_batch) unchanged."""
    if hasattr(value, "dim") and value.dim() >= 1 and value.size(0) == total:
        return value.index_select(0, rows.to(value.device))
    if isinstance(value, list) and len(value) == total:
        return [value[i] for i in rows.tolist()]
    return value


def _scale(loss_type: str, inputs: dict[str, Any], live: Any) -> float:
    """Whole-batch loss / loss over the live rows, from how the loss type normalises."""
    if loss_type in ROW_SCALED:
        return float(live.sum()) / live.numel()
    if loss_type == "bnpo":
        mask = inputs["completion_mask"]
        mask = mask * inputs["tool_mask"] if "tool_mask" in inputs else mask
        return float(mask[live].sum().clamp(min=1.0)) / float(mask.sum().clamp(min=1.0))
    return 1.0  # dapo, cispo: num_items_in_batch spans the generation batch and stays in the inputs
