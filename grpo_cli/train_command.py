"""What `grpo train` does with its command line, as a function: overrides, `--resume PATH`, the recipe checked and
planned once (`grpo validate`'s preflight and its `RunPlan`), the accelerate re-launch, the run itself, and the
exit code, so the CLI only parses and renders; and `train(recipe)`, the Python face's `grpo_cli.train`, which
checks and plans the same way.

Above `training/` (layer 7, beside the CLI): it joins the checks (`validation/`) to the run (`training/`,
`launching/`), which read the plan and never import the checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.launching.relaunch import maybe_relaunch, resume_command, train_passthrough, under_launcher
from grpo_cli.planning import RunPlan, plan_run, visible_gpu_count
from grpo_cli.recipe import load_recipe
from grpo_cli.training import run
from grpo_cli.validation import preflight

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.training.run_state import TrainResult

# Exit codes of `grpo train` besides 0 (completed) and 2 (bad input): Ctrl-C/SIGTERM, a health guard's stop.
EXIT_CODES = {"interrupted": 130, "stopped": 3}


@dataclass(kw_only=True)
class TrainRequest:
    """`grpo train`'s arguments (keyword-only, as the flags are)."""

    recipe: Path
    overrides: list[str] = field(default_factory=list)
    output_dir: Path | None = None
    resume: bool = False
    resume_path: str | None = None
    """The checkpoint of `--resume PATH` (None: the newest complete one in the output dir, when `resume`)."""
    force: bool = False
    launch: dict[str, Any] = field(default_factory=dict)
    """launch.* flags (profile, num_processes, num_machines, machine_rank, main_process_ip); None = recipe's."""


def launch_overrides(launch: dict[str, Any]) -> list[str]:
    """The launch flags as `launch.KEY=VALUE` overrides (flags win over the recipe)."""
    return [f"launch.{k}={v}" for k, v in launch.items() if v is not None]


def split_resume_path(overrides: list[str], resume: bool) -> tuple[list[str], str | None]:
    """(overrides, checkpoint): on the command line `--resume PATH` arrives as a bare path among the overrides
    (which all hold '='); the CLI separates them before it builds a TrainRequest."""
    plain = [o for o in overrides if "=" not in o]
    path = plain[0] if resume and len(plain) == 1 else None  # checked by runs.plan_output_dir
    return [o for o in overrides if o != path], path


def checked_plan(recipe: Recipe, plan: RunPlan | None = None) -> RunPlan:
    """The run plan of `grpo train`, decided once, after the recipe passed `grpo validate`'s checks (RecipeError):
    `plan` when one is given (it must be this recipe's), with the time plan the checks add.

    The process that trains samples its free cores; a launcher that re-launches counts the GPUs instead and
    leaves the sampling to its workers (each reads its share from the environment it is given).
    """
    if plan is None:
        relaunches = recipe.launch.spec.multi_process and not under_launcher()
        plan = plan_run(recipe, sample_threads=not relaunches, gpus=visible_gpu_count() if relaunches else None)
    else:
        _plan_of(recipe, plan)
    pf = preflight(recipe, plan)
    pf.raise_for_problems()
    return pf.run


def train(recipe: Recipe, plan: RunPlan | None = None, *, output_dir: str | Path | None = None,
          resume: bool | str | None = None, force: bool = False, console: Console | None = None,
          resume_command: str | None = None) -> TrainResult:
    """Check, plan and train in this process (`grpo_cli.train`): a recipe `grpo validate` refuses raises its
    RecipeError before anything loads. `plan`: one built already for this recipe (`grpo_cli.preflight(recipe).run`),
    its decisions used as they are and the recipe checked against them all the same."""
    plan = checked_plan(recipe, plan)
    return run.train(recipe, plan, output_dir=output_dir, resume=resume, force=force, console=console,
                     resume_command=resume_command)


def _plan_of(recipe: Recipe, plan: RunPlan) -> None:
    """A plan made for another recipe would train that one: refused (the plan's recipe differs from `recipe` only
    in the backend `launch.vllm.mode: auto` chose)."""
    planned = plan.recipe.model_dump(mode="json")
    planned["launch"]["vllm"]["mode"] = recipe.launch.vllm.mode
    differ = _differences(planned, recipe.model_dump(mode="json"))
    if differ:
        raise GrpoError(f"the plan given was made for another recipe ({', '.join(differ[:3])} differ): it would "
                        "train that one", where="plan",
                        fix="Pass the plan of this recipe, `preflight(recipe).run`, or none (train plans it).")


def _differences(one: object, other: object, where: str = "") -> list[str]:
    """The recipe keys whose values differ between two dumped recipes."""
    if isinstance(one, dict) and isinstance(other, dict):
        return [d for k in dict.fromkeys([*one, *other])
                for d in _differences(one.get(k), other.get(k), f"{where}.{k}" if where else str(k))]
    return [] if one == other else [where or "the recipe"]


def run_train_command(req: TrainRequest, console: Console | None = None) -> tuple[int | None, Any]:
    """(exit code of a re-launch, None) when accelerate ran the workers; else (None, TrainResult)."""
    extra = launch_overrides(req.launch)
    overrides, resume_path = req.overrides, req.resume_path
    plan = checked_plan(load_recipe(req.recipe, [*overrides, *extra]))
    passthrough = train_passthrough(req.output_dir, req.resume, resume_path, req.force)
    out = req.output_dir or Path(plan.recipe.output.dir)
    code = maybe_relaunch(plan, req.recipe, overrides, extra, passthrough, lock_dir=out)
    if code is not None:
        return code, None
    hint = resume_command(req.recipe, [*overrides, *extra], out)
    result = run.train(plan.recipe, plan, output_dir=req.output_dir,
                       resume=resume_path or (True if req.resume else None), force=req.force, console=console,
                       resume_command=hint)
    return None, result
