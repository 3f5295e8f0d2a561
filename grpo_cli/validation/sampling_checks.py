"""`sampling:` in `grpo validate`: what dynamic sampling and the zero-advantage skip need, and what they cost; and
`data.pass_rate`, the rows worth sampling at all.

Light on purpose (no torch): the chosen metric, the combinations grpo cannot support yet (refused with the reason,
rather than trained wrongly), and the plan line with the expected extra generation, estimated from the zero-std
share of the last run in the recipe's output directory when there is one, else from `grpo calibrate`'s pass rates
when the recipe reads them. The pass-rate filter's calibration file is read (one short line per prompt, no
`datasets`) to say how many training rows remain.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError, Problem
from grpo_cli.findings import Findings
from grpo_cli.planning.sampling_choice import SKIP_LOSS_TYPES, chosen_metric, shares_prompt
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.schema.rewards import RewardEntry
from grpo_cli.rewards.builtins import BUILTIN_REWARDS

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight

def check_sampling(recipe: Recipe, pf: Preflight) -> Findings:
    """The problems and plan lines of `sampling:`."""
    return Findings(problems=sampling_problems(recipe), plan=dict(sampling_plan(recipe)))


def sampling_problems(recipe: Recipe) -> list[Problem]:
    """What the recipe's `sampling` asks that grpo cannot do (yet) with the rest of the recipe."""
    problems: list[Problem] = []
    if recipe.sampling.dynamic is not None:
        problems += _dynamic_problems(recipe)
    if recipe.sampling.skip_zero_advantage:
        problems += [Problem("sampling.skip_zero_advantage", what, fix) for what, fix in skip_blockers(recipe)]
    if recipe.sampling.share_prompt_forward:
        problems += [Problem("sampling.share_prompt_forward", what, fix) for what, fix in share_blockers(recipe)]
    return problems


def _dynamic_problems(recipe: Recipe) -> list[Problem]:
    where, t = "sampling.dynamic", recipe.training
    labels = [e.label for e in recipe.rewards]
    out: list[Problem] = []
    metric = chosen_metric(recipe)
    if metric is None:
        out.append(Problem(f"{where}.metric", "is not set and the recipe has several rewards, none named accuracy",
                           f"Name the outcome reward: one of {', '.join(labels)} (or `reward` for the total)."))
    elif metric != "reward" and metric not in labels:
        out.append(Problem(f"{where}.metric", f"{metric!r} is not a reward of this recipe",
                           f"Use one of {', '.join(labels) or '(none)'}, or `reward` for the weighted total."))
    out += _unreachable_min_std(recipe, metric)
    unsupported = [
        ((recipe.launch.spec.multi_process or recipe.launch.world_size > 1)
         and (t.per_device_train_batch_size * (t.steps_per_generation or t.gradient_accumulation_steps))
         % t.num_generations != 0,
         f"keeps whole groups on each process, but a process's generation batch (per_device_train_batch_size "
         f"{t.per_device_train_batch_size} x steps_per_generation) is not a multiple of num_generations "
         f"{t.num_generations} under launch.profile={recipe.launch.profile}",
         "Make training.per_device_train_batch_size a multiple of training.num_generations."),
        (bool(recipe.data.images), "does not work with vision-language data yet (TRL's image tensors have a row "
         "per image or patch, not per completion, sliced per model family: trl/trainer/grpo_trainer.py "
         "_get_per_token_logps_and_entropies)", "Remove `sampling.dynamic`."),
        (t.beta > 0, "needs beta: 0 (the reference log-probabilities of refilled groups were computed with another "
         "padding)", "Set training.beta: 0, as DAPO does."),
        (t.gradient_accumulation_steps % ((t.steps_per_generation or t.gradient_accumulation_steps)
                                          * t.num_iterations) != 0,
         "needs on-policy batches (TRL keeps old log-probabilities when generation and optimizer steps are not "
         "aligned, and those of refilled groups were computed with another padding)",
         "Use num_iterations: 1 and steps_per_generation equal to gradient_accumulation_steps."),
    ]
    out += [Problem(where, what, fix) for bad, what, fix in unsupported if bad]
    return out


def metric_span(recipe: Recipe, metric: str | None) -> tuple[float, float] | None:
    """The lowest and highest value the chosen metric can take, where grpo knows it: a built-in reward with a
    fixed range, or the weighted total of rewards that all have one; None otherwise (user code, reward models)."""
    def span(entry: RewardEntry) -> tuple[float, float] | None:
        row = BUILTIN_REWARDS.get(entry.name or "") if not (entry.function or entry.model) else None
        return row.span if row is not None else None

    entries = recipe.rewards if metric == "reward" else [e for e in recipe.rewards if e.label == metric]
    low = high = 0.0
    for entry in entries:
        known = span(entry)
        if known is None:
            return None
        ends = sorted((known[0] * entry.weight, known[1] * entry.weight))
        low, high = low + ends[0], high + ends[1]
    return (low, high) if entries else None


def max_group_std(span: tuple[float, float], group: int) -> float:
    """The largest population std a group of `group` values in `span` can have: half of them at each end (one
    more at one end when the group is odd). The std grpo's filter computes is the population one."""
    low, high = group // 2, group - group // 2
    return (span[1] - span[0]) * math.sqrt(low * high) / group


def _unreachable_min_std(recipe: Recipe, metric: str | None) -> list[Problem]:
    dyn = recipe.sampling.dynamic
    span = metric_span(recipe, metric) if dyn is not None and metric else None
    if dyn is None or span is None:
        return []
    group = recipe.training.num_generations
    most = max_group_std(span, group)
    if dyn.min_std < most - 1e-7:
        return []
    return [Problem("sampling.dynamic.min_std",
                    f"{dyn.min_std:g} drops every group: {metric!r} scores in [{span[0]:g}, {span[1]:g}], so the "
                    f"population std of a group of {group} completions is at most {most:.3g} (half of them at each "
                    "end); every batch would train on zero-advantage filler alone",
                    f"Set min_std below {most:.3g} (0, DAPO's choice, drops only groups whose completions all got "
                    "the same score).")]


def skip_blockers(recipe: Recipe) -> list[tuple[str, str]]:
    """(what, fix) for each reason the gradient of a zero-advantage completion may not be exactly zero."""
    t = recipe.training
    blockers = [
        (t.beta > 0, "the KL term gives every completion a gradient (beta > 0)", "Set training.beta: 0."),
        (bool(t.get("entropy_coef")) or bool(t.get("use_adaptive_entropy")),
         "the entropy bonus gives every completion a gradient", "Set training.entropy_coef: 0."),
        (float(t.get("top_entropy_quantile", 1.0) or 1.0) < 1.0,
         "the entropy mask's quantile is taken over the whole batch", "Set training.top_entropy_quantile: 1."),
        (t.get("off_policy_mask_threshold") is not None, "the off-policy mask is not supported with the skip",
         "Remove training.off_policy_mask_threshold."),
        (bool(t.router_aux_loss_coef), "the MoE router loss gives every completion a gradient",
         "Set training.router_aux_loss_coef: 0."),
        (str(t.get("loss_type")) not in SKIP_LOSS_TYPES, f"loss_type {t.get('loss_type')!r} is not one whose "
         "normalisation grpo rescales exactly", f"Use one of {', '.join(SKIP_LOSS_TYPES)}."),
    ]
    return [(what, fix) for bad, what, fix in blockers if bad]


def share_blockers(recipe: Recipe) -> list[tuple[str, str]]:
    """(what, fix) for each reason one prompt forward per group would change the update or is unproven."""
    t, lora = recipe.training, recipe.model.lora
    blockers = [
        (recipe.launch.vllm.mode == "async", "does not apply to TRL's AsyncGRPOTrainer (launch.vllm.mode: async), "
         "whose loss packs the completions and scores them in its own compute_loss (trl/experimental/async_grpo/"
         "async_grpo_trainer.py), not through the method grpo hooks", "Remove "
         "`sampling.share_prompt_forward`, or use launch.vllm.mode: colocate or server."),
        (bool(recipe.data.images), "does not work with image prompts (TRL's image tensors have a row per image or "
         "patch, not per completion)", "Remove `sampling.share_prompt_forward`."),
        (t.checkpointing(), "does not work with gradient checkpointing (the prompt's KV cache would be "
         "recomputed inside each checkpointed layer)", "Set training.gradient_checkpointing: false (TRL turns it on "
         "by default), or remove `sampling.share_prompt_forward`."),
        (lora is not None and lora.dropout > 0, f"would share one dropout mask across a group's completions (LoRA "
         f"dropout {lora.dropout if lora else 0:g}); TRL draws one per completion", "Set model.lora.dropout: 0, or "
         "remove `sampling.share_prompt_forward`."),
    ]
    return [(what, fix) for bad, what, fix in blockers if bad]


def last_zero_std_share(recipe: Recipe) -> tuple[float | None, str]:
    """The mean `frac_reward_zero_std` of the last run in the recipe's output directory, and what the estimate
    rests on; (None, why) when that run left no usable value (none, or only NaN/inf/out-of-range ones)."""
    from grpo_cli import runs  # here: `validate` of a recipe without sampling never needs the run directory

    path = Path(recipe.output.dir) / runs.METRICS  # where `grpo train` writes it (relative to the current directory)
    if not path.is_file():
        return None, f"no earlier run in {recipe.output.dir} to estimate from"
    values, unusable = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line).get("frac_reward_zero_std")
        except (ValueError, AttributeError):
            continue
        if isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0:
            values.append(float(value))
        elif value is not None:
            unusable += 1
    if values:
        return sum(values) / len(values), "last run had"
    if unusable:
        return None, (f"unknown: the last run's {path} logged frac_reward_zero_std only as NaN, inf or out of "
                      "[0, 1], nothing to estimate from")
    return None, f"no earlier run in {recipe.output.dir} to estimate from"


def check_pass_rate(recipe: Recipe, pf: Preflight) -> Findings:
    """`data.pass_rate`: a missing or broken calibration file is a problem; else the training rows become the
    calibrated prompts it keeps, and the data line of the plan says so."""
    spec = recipe.data.pass_rate
    found = Findings()
    if spec is None:
        return found
    from grpo_cli.data.pass_rate import calibration_path, read_calibration

    try:
        calibration = read_calibration(calibration_path(recipe, spec))
    except GrpoError as exc:
        found.problems.append(exc.problems[0])
        return found
    kept, total = calibration.kept(spec), len(calibration.rates)
    if kept == 0:
        found.problems.append(Problem("data.pass_rate.range", f"no calibrated prompt has a pass rate in {spec.range} "
                                      f"({total} in {calibration.path})", "Widen the range, or calibrate with more "
                                      "samples per prompt (`grpo calibrate -k`)."))
    if pf.train_rows is not None and not spec.keep_uncalibrated:
        pf.train_rows = found.plan["train rows"] = min(pf.train_rows, kept)
    each = f", {calibration.k} completions each" if calibration.k else ""
    rest = "rows not calibrated kept too" if spec.keep_uncalibrated else "rows not calibrated dropped"
    found.plan["data"] = (f"{pf.plan.get('data', 'local files')}; pass-rate filter keeps {kept} of {total} calibrated "
                          f"prompts (in {spec.range}{each}; {rest})")
    return found


def calibrated_zero_std_share(recipe: Recipe) -> float | None:
    """The zero-std share training would see on the rows `data.pass_rate` keeps, from their pass rates."""
    spec = recipe.data.pass_rate
    if spec is None:
        return None
    from grpo_cli.data.pass_rate import calibration_path, read_calibration

    try:
        calibration = read_calibration(calibration_path(recipe, spec))
    except GrpoError:
        return None
    return calibration.zero_std_share(recipe.training.num_generations, spec)


def groups_per_process(recipe: Recipe) -> int:
    """The groups one process's generation batch holds (at least 1): what a step must keep."""
    t = recipe.training
    return max((t.per_device_train_batch_size * (t.steps_per_generation or t.gradient_accumulation_steps))
               // t.num_generations, 1)


def expected_filler(generated: int, target: int, keep: float) -> float:
    """The expected share of a batch of `target` groups left to zero-advantage filler when `generated` groups are
    drawn and each is kept with probability `keep` (independently): E[max(target - kept, 0)] / target."""
    keep = min(max(keep, 0.0), 1.0)
    if keep in (0.0, 1.0):
        return 1.0 - keep if generated >= target or keep == 0.0 else (target - generated) / target
    short, p = 0.0, (1.0 - keep) ** generated  # P(kept = 0), then the binomial recurrence
    for kept in range(min(generated, target)):
        short += (target - kept) * p
        p *= (generated - kept) / (kept + 1) * keep / (1.0 - keep)
    return short / target


def _estimate(recipe: Recipe) -> tuple[float | None, str]:
    """The expected zero-std share and what it rests on: the last run, else the calibrated pass rates."""
    zero, source = last_zero_std_share(recipe)
    if zero is None:
        calibrated = calibrated_zero_std_share(recipe)
        if calibrated is not None:
            zero, source = calibrated, "calibrated pass rates give"
    return zero, source


def _refill_cost(zero: float | None, cap: int) -> str:
    if zero is None:
        return f"extra generation up to +{cap:.0%} per step"
    return f"about +{min(zero / max(1.0 - zero, 1e-9), float(cap)):.0%} generation per step (at most +{cap:.0%})"


def _oversample_cost(zero: float | None, factor: float, target: int) -> str:
    generated = math.ceil(factor * target - 1e-9)
    cost = f"+{generated / target - 1:.0%} generation per step, in one round of {generated} groups for {target}"
    if zero is None:
        return cost
    return f"{cost}, about {expected_filler(generated, target, 1.0 - zero):.0%} of trained groups flat filler"


def sampling_plan(recipe: Recipe) -> dict[str, str]:
    """The plan lines of `sampling:` (empty when off): the chosen strategy's cost, and the other's for
    comparison, from the last run's (or calibration's) zero-std share."""
    plan: dict[str, str] = {}
    s = recipe.sampling
    if s.dynamic is not None:
        d = s.dynamic
        zero, source = _estimate(recipe)
        target = groups_per_process(recipe)
        head = f"dynamic, on {chosen_metric(recipe) or '?'} (drop groups with std <= {d.min_std:g}), "
        if d.factor is None:
            head += f"up to {d.max_rounds} generation rounds per batch"
            cost, other = _refill_cost(zero, d.max_rounds - 1), "strategy: oversample (x2)"
            other += f" instead: {_oversample_cost(zero, 2.0, target)}"
        else:
            head += f"strategy oversample x{d.factor:g}, never a second round"
            cost, other = _oversample_cost(zero, d.factor, target), "strategy: refill (3 rounds)"
            other += f" instead: {_refill_cost(zero, 2)}"
        said = f"{source} {zero:.0%} zero-std groups: {cost}" if zero is not None else f"{cost} ({source})"
        plan["sampling"] = f"{head}; {said}; {other}"
    if s.skip_zero_advantage:
        plan["zero-advantage skip"] = "completions with advantage exactly 0 skip forward and backward (same update)"
    if s.share_prompt_forward:
        plan["shared prompt forward"] = (
            "each group's prompt runs forward and backward once, not once per completion (the same update to float "
            "order)" if shares_prompt(recipe) else f"off under launch.profile={recipe.launch.profile}: proven on "
            "one process only (two forwards before one backward under DDP, FSDP or ZeRO is untested), so each "
            "process runs TRL's forward, the same update")
    return plan
