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
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError, Problem
from grpo_cli.findings import Findings
from grpo_cli.recipe.schema import Recipe

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight

SKIP_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")
"""Loss types whose normaliser grpo rescales exactly when zero-advantage rows leave the batch (vespo's weights
depend on the batch, so it is not here)."""


def check_sampling(recipe: Recipe, pf: Preflight) -> Findings:
    """The problems and plan lines of `sampling:`."""
    return Findings(problems=sampling_problems(recipe), plan=dict(sampling_plan(recipe)))


def chosen_metric(recipe: Recipe) -> str | None:
    """The reward label whose spread decides for dynamic sampling (`reward`: the weighted total), or None when
    the recipe leaves it open (several rewards, none named `accuracy`, eval.metric no reward)."""
    dyn = recipe.sampling.dynamic
    labels = [e.label for e in recipe.rewards]
    if dyn is not None and dyn.metric:
        return dyn.metric
    if "accuracy" in labels:
        return "accuracy"
    if recipe.eval.metric in labels:
        return recipe.eval.metric
    return labels[0] if len(labels) == 1 else None


def sampling_problems(recipe: Recipe) -> list[Problem]:
    """What the recipe's `sampling` asks that grpo cannot do (yet) with the rest of the recipe."""
    problems: list[Problem] = []
    if recipe.sampling.dynamic is not None:
        problems += _dynamic_problems(recipe)
    if recipe.sampling.skip_zero_advantage:
        problems += [Problem("sampling.skip_zero_advantage", what, fix) for what, fix in skip_blockers(recipe)]
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
    unsupported = [
        (recipe.launch.spec.multi_process or recipe.launch.world_size > 1,
         f"runs on one process only (launch.profile={recipe.launch.profile} runs several, and the groups refilled "
         "on one process would have to be gathered on all)", "Use launch.profile cpu or single_gpu."),
        (recipe.launch.vllm.mode != "off", "does not work with vLLM yet (untested extra generation rounds and "
         "importance-sampling tensors)", "Set launch.vllm.mode: off."),
        (bool(recipe.tools) or recipe.environment is not None, "does not work with tools or environments yet",
         "Remove `sampling.dynamic` or the tools."),
        (bool(recipe.data.images), "does not work with vision-language data yet (image tensors are not merged)",
         "Remove `sampling.dynamic`."),
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


def last_zero_std_share(recipe: Recipe) -> float | None:
    """The mean `frac_reward_zero_std` of the last run in the recipe's output directory, if it left metrics."""
    from grpo_cli import runs  # here: `validate` of a recipe without sampling never needs the run directory

    path = Path(recipe.output.dir) / runs.METRICS  # where `grpo train` writes it (relative to the current directory)
    if not path.is_file():
        return None
    values = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line).get("frac_reward_zero_std")
        except (ValueError, AttributeError):
            continue
        if isinstance(value, int | float):
            values.append(float(value))
    return sum(values) / len(values) if values else None


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


def sampling_plan(recipe: Recipe) -> dict[str, str]:
    """The plan lines of `sampling:` (empty when off)."""
    plan: dict[str, str] = {}
    s = recipe.sampling
    if s.dynamic is not None:
        d = s.dynamic
        head = (f"dynamic, on {chosen_metric(recipe) or '?'} (drop groups with std <= {d.min_std:g}), up to "
                f"{d.max_rounds} generation rounds per batch")
        zero, source = last_zero_std_share(recipe), "last run had"
        if zero is None:
            zero, source = calibrated_zero_std_share(recipe), "calibrated pass rates give"
        cap = d.max_rounds - 1
        if zero is None:
            cost = (f"extra generation up to +{cap:.0%} per step (no earlier run in {recipe.output.dir} to "
                    "estimate from)")
        else:
            extra = min(zero / max(1.0 - zero, 1e-9), float(cap))
            cost = (f"{source} {zero:.0%} zero-std groups: about +{extra:.0%} generation per step "
                    f"(at most +{cap:.0%})")
        plan["sampling"] = f"{head}; {cost}"
    if s.skip_zero_advantage:
        plan["zero-advantage skip"] = "completions with advantage exactly 0 skip forward and backward (same update)"
    return plan
