"""Training keys that pass the field check but go wrong later: scheduler kwargs, hub uploads, `do_eval`; and
`output:` (where the run goes, the repository the final model is pushed to).

Each is accepted by GRPOConfig as a value of the right type; the mistake shows only when
transformers builds the scheduler (after the model has loaded), when the first upload runs,
or never (an evaluation that silently does not happen). The scheduler's parameters are read
from the installed transformers' source, so the check follows its releases without importing torch.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError, Problem, did_you_mean
from grpo_cli.findings import Findings
from grpo_cli.recipe.schema import Recipe
from grpo_cli.recipe.schema.training import TrainingSection

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight

# Passed by transformers' get_scheduler itself: the same key in lr_scheduler_kwargs is a TypeError.
_PASSED_BY_TRAINER = ("optimizer", "num_warmup_steps", "num_training_steps")
# Schedulers whose function get_scheduler calls without lr_scheduler_kwargs (they are dropped silently).
_KWARGS_IGNORED = ("constant", "constant_with_warmup")
# get_reduce_on_plateau_schedule forwards **kwargs to torch's ReduceLROnPlateau.
_PLATEAU = ("mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps")


def _transformers_file(name: str) -> Path | None:
    spec = importlib.util.find_spec("transformers")  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / name
    return path if path.is_file() else None


@cache
def scheduler_signature(kind: str) -> tuple[dict[str, bool], bool] | None:
    """({parameter: has a default}, takes **kwargs) of the function lr_scheduler_type `kind` names, from
    transformers' source. Only that function is parsed: parsing both modules whole cost validate 30 ms."""
    opt, utils = _transformers_file("optimization.py"), _transformers_file("trainer_utils.py")
    if opt is None or utils is None:
        return None
    enum = re.search(r"^class SchedulerType\b.*?(?=^\S)", utils.read_text(encoding="utf-8"), re.M | re.S)
    attrs = dict(re.findall(r'^\s+([A-Z_][A-Z0-9_]*)\s*=\s*"([^"]+)"', enum.group(0), re.M)) if enum else {}
    attr = next((a for a, value in attrs.items() if value == kind), None)
    text = opt.read_text(encoding="utf-8")
    table = re.search(r"^TYPE_TO_SCHEDULER_FUNCTION\s*=\s*\{(.*?)^\}", text, re.M | re.S)
    funcs = dict(re.findall(r"SchedulerType\.(\w+)\s*:\s*(\w+)", table.group(1))) if table else {}
    body = re.search(rf"^def {re.escape(funcs.get(attr or '', '-'))}\(.*?(?=^[@A-Za-z_])", text, re.M | re.S)
    if attr is None or body is None:
        return None
    func = ast.parse(body.group(0)).body[0]
    if not isinstance(func, ast.FunctionDef):
        return None
    a = func.args
    positional = [*a.posonlyargs, *a.args]
    params = {arg.arg: i >= len(positional) - len(a.defaults) for i, arg in enumerate(positional)}
    params.update({arg.arg: d is not None for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)})
    return params, a.kwarg is not None


def check_training_keys(recipe: Recipe, pf: Preflight) -> Findings:
    """The training keys GRPOConfig accepts that would fail later (or silently do nothing)."""
    found = scheduler_problems(recipe.training)
    found.add(hub_problems(recipe))
    found.add(Findings(problems=eval_flag_problems(recipe), warnings=logging_warnings(recipe.training)))
    return found


def check_output(recipe: Recipe, pf: Preflight) -> Findings:
    """The plan's `output` line; output.push_to_hub is used after training, so a repo id the Hub refuses must fail
    now, not hours later."""
    found = Findings(plan={"output": recipe.output.dir})
    if recipe.output.push_to_hub:
        from grpo_cli.artefacts.hub import check_repo_id

        try:
            check_repo_id(recipe.output.push_to_hub, where="output.push_to_hub", bare_ok=True)
        except GrpoError as exc:
            found.problems += exc.problems
    return found


def scheduler_problems(training: TrainingSection) -> Findings:
    """lr_scheduler_kwargs keys against the parameters of the scheduler lr_scheduler_type names."""
    kwargs = training.lr_scheduler_kwargs
    kind = training.lr_scheduler_type
    signature = scheduler_signature(kind) if isinstance(kwargs, dict) else None
    if signature is None:
        return Findings()
    where = "training.lr_scheduler_kwargs"
    if kwargs and kind in _KWARGS_IGNORED:
        return Findings(warnings=[f"{where}: lr_scheduler_type {kind!r} takes no arguments, so transformers ignores "
                                  f"{', '.join(map(str, kwargs))}; use e.g. cosine_with_min_lr for a floor"])
    params, var_kwargs = signature
    accepted = [p for p in params if p not in _PASSED_BY_TRAINER]
    if var_kwargs and kind == "reduce_lr_on_plateau":
        accepted, var_kwargs = list(_PLATEAU), False
    problems = []
    for key in kwargs:
        if key in _PASSED_BY_TRAINER:
            problems.append(Problem(f"{where}.{key}", "is passed by the trainer itself (from warmup and the step "
                                    "count), so setting it here is a TypeError when the scheduler is built",
                                    "Use training.warmup_steps / max_steps instead."))
        elif not var_kwargs and key not in accepted:
            guess = did_you_mean(str(key), accepted)
            problems.append(Problem(f"{where}.{key}", f"is not a parameter of the {kind!r} scheduler; transformers "
                                    "would raise a TypeError when training starts, after the model has loaded",
                                    (f"Did you mean {guess!r}? " if guess else "")
                                    + f"It takes: {', '.join(accepted) or 'nothing'}."))
    missing = [p for p, has_default in params.items() if not has_default and p not in _PASSED_BY_TRAINER
               and p not in kwargs]
    if missing:
        problems.append(Problem(where, f"the {kind!r} scheduler needs {', '.join(missing)}",
                                f"Add {', '.join(f'{m}: ...' for m in missing)} to lr_scheduler_kwargs."))
    if kind in ("cosine_with_min_lr", "cosine_warmup_with_min_lr") and not {"min_lr", "min_lr_rate"} & set(kwargs):
        problems.append(Problem(where, f"the {kind!r} scheduler needs one of min_lr or min_lr_rate",
                                "Add e.g. `lr_scheduler_kwargs: {min_lr_rate: 0.1}` (open-r1's setting)."))
    return Findings(problems=problems)


def _hub_token() -> str | None:
    """The token an upload would use (HF_TOKEN or the saved login), without a network call."""
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return "env"
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def hub_problems(recipe: Recipe) -> Findings:
    """training.push_to_hub / hub_*: a token to upload with, and one upload rather than two."""
    t = recipe.training
    found = Findings()
    problems, warnings = found.problems, found.warnings
    if t.push_to_hub or t.hub_model_id:
        if t.push_to_hub and _hub_token() is None:
            problems.append(Problem("training.push_to_hub", "uploads every save to the Hub, but there is no Hub "
                                    "token here (HF_TOKEN unset, no saved login): transformers would fail creating "
                                    "the repository when training starts, after the model has loaded",
                                    "Run `huggingface-cli login` or set HF_TOKEN, or drop push_to_hub."))
        if not t.push_to_hub:
            warnings.append("training.hub_model_id is set but training.push_to_hub is false: nothing is uploaded "
                            "during training (use output.push_to_hub to upload the final model)")
        elif recipe.output.push_to_hub:
            warnings.append(f"training.push_to_hub uploads each checkpoint (to "
                            f"{t.hub_model_id or 'a repo named after output.dir'}) and "
                            f"output.push_to_hub uploads the final model to {recipe.output.push_to_hub} again "
                            "when training ends; keep one of them unless you want both")
    if recipe.output.push_to_hub and _hub_token() is None:
        warnings.append(f"output.push_to_hub={recipe.output.push_to_hub}: there is no Hub token here (HF_TOKEN "
                        "unset, no saved login), so the final upload will fail; the trained model stays in "
                        "output.dir and `grpo push` uploads it later")
    return found


def logging_warnings(training: TrainingSection) -> list[str]:
    """A run shorter than one logging interval: transformers logs no step at all (grpo logs the last one), so the
    plots get one dot and the first-vs-last table compares a step with itself; said before the run, not after."""
    steps, every = training.max_steps, training.logging_steps
    if training.logging_strategy != "steps" or steps <= 0 or every < 1 or steps >= every:
        return []
    return [f"training.max_steps={steps} is below training.logging_steps={every:g}: no step would be logged at its "
            "interval; grpo logs the last step only, so report.png has one point per curve and the first-vs-last "
            f"table compares that step with itself; set training.logging_steps=1 (or a divisor of {steps}) for "
            "curves"]


def eval_flag_problems(recipe: Recipe) -> list[Problem]:
    """`do_eval: true` alone evaluates nothing: transformers' Trainer reads eval_strategy, not do_eval."""
    t = recipe.training
    if t.do_eval and t.eval_strategy == "no":
        return [Problem("training.do_eval", "is true, but transformers' Trainer never reads do_eval: with "
                        "eval_strategy 'no' nothing would be evaluated",
                        "Set training.eval_strategy: steps (and eval_steps) with data.eval_split or "
                        "data.eval_holdout, or use eval.before_after / eval.every_steps; drop do_eval.")]
    return []
