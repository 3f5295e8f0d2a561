"""`grpo validate`: everything that can be checked before a model loads, and a plan of the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo_cli.data.peek import FULL_SCAN_BYTES, FileScan, scan_file
from grpo_cli.errors import GrpoError, Problem, RecipeError
from grpo_cli.recipe.schema import Recipe
from grpo_cli.rewards.loaders import RewardInfo, inspect_reward
from grpo_cli.validation.batching import BatchPlan, plan_batches
from grpo_cli.validation.model_checks import model_checks
from grpo_cli.validation.sampling import sampling_checks
from grpo_cli.validation.vision import vision_checks


@dataclass
class Preflight:
    """The outcome of the preflight: problems (fatal), warnings, and the plan."""

    recipe: Recipe
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    batches: BatchPlan | None = None
    rewards: list[RewardInfo] = field(default_factory=list)
    columns: list[str] | None = None
    train_rows: int | None = None
    eval_rows: int | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    scans: dict[str, FileScan] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_for_problems(self) -> None:
        if self.problems:
            raise RecipeError(self.problems, source=self.recipe.source)


def _model_checks(recipe: Recipe, pf: Preflight) -> str:
    found = model_checks(recipe)
    pf.problems, pf.warnings = pf.problems + found.problems, pf.warnings + found.warnings
    return found.description


def _data_checks(recipe: Recipe, pf: Preflight) -> str:
    data = recipe.data
    if data.from_environment:
        pf.columns = []  # rewards get no row columns: only what TRL passes (prompts, completions, environments)
        return "no rows: the environment's reset() serves every prompt"
    if data.dataset:
        desc = f"hub dataset {data.dataset}" + (f" ({data.config})" if data.config else "") + f", split {data.split}"
        pf.columns = list(data.keep_columns) if data.keep_columns is not None else None
        pf.warnings.append(f"hub dataset {data.dataset} is not read when validating: its columns "
                           f"({', '.join(data.prompt.columns)} for the prompt) are checked when training loads it; "
                           "`grpo check-rewards` with local `data.files` checks them now.")
        return desc
    files = data.file_map
    if data.split not in files:
        pf.problems.append(Problem("data.files", f"has no {data.split!r} split (splits: {', '.join(files)})",
                                   "Name the training files under the key given by `data.split`."))
        return "local files"
    if data.eval_split and data.eval_split not in files:
        pf.problems.append(Problem("data.eval_split", f"{data.eval_split!r} is not a key of data.files "
                                   f"(splits: {', '.join(files)})", "Add its files to `data.files`."))
    columns = _file_columns(recipe, pf)
    if columns is None:
        return "local files"
    from grpo_cli.data.derive import derived_roots

    for name, root in derived_roots(data).items():
        if root not in columns:
            pf.problems.append(Problem(f"data.columns.{name}", f"reads column {root!r}, which the data does not have",
                                       f"Columns in the {data.split!r} files: {', '.join(columns)}."))
    columns = [*columns, *(c for c in data.columns if c not in columns)]
    for i, test in enumerate(data.filter):
        if test.column is not None and test.column not in columns:
            pf.problems.append(Problem(f"data.filter[{i}].column", f"{test.column!r} is not a column of the data",
                                       f"Columns: {', '.join(columns)}."))
    missing = [c for c in data.prompt.columns if c not in columns]
    if missing:
        key = "data.prompt.column" if data.prompt.column else "data.prompt.template"
        pf.problems.append(Problem(key, f"uses column(s) {', '.join(missing)} that the data does not have",
                                   f"Columns in the {data.split!r} files: {', '.join(columns)}."))
    if data.answer and data.answer.column not in columns:
        pf.problems.append(Problem("data.answer.column", f"{data.answer.column!r} is not a column of the data",
                                   f"Columns: {', '.join(columns)}."))
    if data.keep_columns is not None:
        absent = [c for c in data.keep_columns if c not in columns and not (data.answer and c == data.answer.into)]
        if absent:
            pf.problems.append(Problem("data.keep_columns", f"names column(s) {', '.join(absent)} the data lacks",
                                       f"Columns: {', '.join(columns)}."))
    kept = list(data.keep_columns) if data.keep_columns is not None else list(columns)
    pf.columns = [c for c in kept if c != "prompt"]
    _count_rows(recipe, pf)
    return "local files " + ", ".join(f"{s}: {', '.join(ps)}" for s, ps in files.items())


def _file_columns(recipe: Recipe, pf: Preflight) -> list[str] | None:
    """Every local file exists, parses to the last record (when small enough) and has rows; the training columns."""
    data = recipe.data
    columns: list[str] | None = None
    for split, paths in data.file_map.items():
        for p in paths:
            path = recipe.resolve_path(p)
            if not path.exists():
                pf.problems.append(Problem(f"data.files.{split}", f"file {p} not found (looked at {path})",
                                           "Paths are relative to the recipe's directory."))
                continue
            try:
                scan = pf.scans[str(path)] = scan_file(path)
            except GrpoError as exc:
                pf.problems.append(Problem(f"data.files.{split}", exc.problems[0].render()))
                continue
            if not scan.complete and path.suffix != ".json":
                pf.warnings.append(f"{p} is over {FULL_SCAN_BYTES // 2**20} MB: only its first record was checked; "
                                   "a broken record further on is reported when training loads it.")
            if not scan.columns:
                pf.problems.append(Problem(f"data.files.{split}", f"{p} has no rows",
                                           "Give a file with at least one record."))
                continue
            if split == data.split and columns is None:
                columns = scan.columns
    return columns


def _count_rows(recipe: Recipe, pf: Preflight) -> None:
    """Training and eval rows the run will see (after holdout and max_samples)."""
    data, files = recipe.data, recipe.data.file_map

    def rows(split: str) -> int:
        found = [pf.scans.get(str(recipe.resolve_path(p))) for p in files.get(split, [])]
        return sum(scan.rows for scan in found if scan is not None)

    pf.train_rows = rows(data.split)
    if data.eval_split:
        pf.eval_rows = rows(data.eval_split)
    elif data.eval_holdout:
        pf.eval_rows = int(data.eval_holdout) if data.eval_holdout >= 1 else max(1, int(pf.train_rows *
                                                                                         data.eval_holdout))
        if pf.eval_rows >= pf.train_rows:
            pf.problems.append(Problem("data.eval_holdout", f"holds out {pf.eval_rows} rows of {pf.train_rows}",
                                       "Hold out fewer rows, or a fraction (e.g. 0.05)."))
        pf.train_rows -= pf.eval_rows
    if data.max_samples:
        pf.train_rows = min(pf.train_rows, data.max_samples)
    if data.max_eval_samples and pf.eval_rows:
        pf.eval_rows = min(pf.eval_rows, data.max_eval_samples)


def _reward_checks(recipe: Recipe, pf: Preflight) -> None:
    provided = None if pf.columns is None else set(pf.columns)
    if provided is not None and recipe.data.answer:
        provided.add(recipe.data.answer.into)
    for i, entry in enumerate(recipe.rewards):
        try:
            info = inspect_reward(entry, recipe.base_dir, i)
        except GrpoError as exc:
            pf.problems.extend(exc.problems)
            continue
        pf.rewards.append(info)
        if provided is None:
            continue
        for alternatives in info.columns:
            if not provided.intersection(alternatives):
                need = " or ".join(f"`{c}`" for c in alternatives)
                pf.problems.append(Problem(
                    f"rewards[{i}]", f"reward {entry.label!r} needs the dataset column {need}, which the data "
                    f"mapping does not provide (it provides: {', '.join(sorted(provided)) or 'nothing'})",
                    "Add the column to `data.keep_columns`, map it with `data.answer` (e.g. `into: answer`), "
                    "or bind a value with the reward's `params`."))


def _tool_checks(recipe: Recipe, pf: Preflight) -> str:
    """Tools and environments, read statically (grpo_cli.tools.static, imported only for them); the plan line."""
    if not recipe.tools and recipe.environment is None:
        if recipe.training.max_tool_calling_iterations is not None:
            pf.warnings.append("training.max_tool_calling_iterations is set but the recipe has no `tools` or "
                               "`environment`: it has no effect")
        return ""
    from grpo_cli.tools import check_tools

    check = check_tools(recipe, pf.columns)
    pf.problems.extend(check.problems)
    pf.warnings.extend(check.warnings)
    return "; ".join(check.plan)


def _training_checks(recipe: Recipe, pf: Preflight) -> None:
    plan, problems = plan_batches(recipe.training, recipe.launch.world_size, recipe.data.has_eval)
    pf.problems.extend(problems)
    pf.batches = plan
    per_process = plan.per_device * plan.steps_per_generation if plan is not None else 0
    if plan is not None and plan.world_size > 1 and per_process % plan.num_generations:
        pf.warnings.append(
            f"each process generates {plan.per_device * plan.steps_per_generation} completions per generation, not a "
            f"multiple of num_generations={plan.num_generations}: a prompt's group is split across processes, so "
            "rewards that compare completions within a call (e.g. `length`) see partial groups. TRL still gathers "
            "all rewards before computing advantages.")
    if recipe.launch.spec.multi_process and recipe.launch.num_processes is None:
        from grpo_cli.validation.topology import visible_gpu_count

        if visible_gpu_count() == 0:
            pf.warnings.append(f"launch.profile={recipe.launch.profile} without launch.num_processes and no GPU "
                               "visible here: `grpo train` will ask for --num-processes; the batch plan above "
                               "assumes 1 process.")
    lr = recipe.training.learning_rate
    if lr > 1e-3 and recipe.model.lora is None and not recipe.model.name_or_path.startswith("bundled:"):
        pf.warnings.append(f"training.learning_rate={lr:g} is very high for full fine-tuning of a pretrained "
                           "model (1e-6 .. 1e-5 is typical); the policy may collapse.")
    if recipe.model.quantization and recipe.launch.spec.cpu_only:
        pf.problems.append(Problem("model.quantization", "4/8-bit loading needs a CUDA GPU, but launch.profile is cpu",
                                   "Remove `quantization` or run on a GPU."))


def _push_check(recipe: Recipe, pf: Preflight) -> None:
    """output.push_to_hub is used after training: a repo id the Hub refuses must fail now, not hours later."""
    if recipe.output.push_to_hub:
        from grpo_cli.artefacts.hub import check_repo_id

        try:
            check_repo_id(recipe.output.push_to_hub, where="output.push_to_hub", bare_ok=True)
        except GrpoError as exc:
            pf.problems.extend(exc.problems)


def _eval_checks(recipe: Recipe, pf: Preflight) -> None:
    """eval.every_steps must name a metric the evaluation can produce."""
    ev = recipe.eval
    if ev.on_save and recipe.launch.spec.shards_weights and (recipe.launch.num_processes or 2) > 1:
        pf.problems.append(Problem("eval.on_save", f"evaluates on the main process alone, but launch.profile="
                                   f"{recipe.launch.profile} shards the weights, so generating would wait forever",
                                   "Use `grpo eval --suite` on the saved checkpoints instead, or launch.profile ddp."))
    if ev.on_save and recipe.training.save_strategy == "no":
        pf.warnings.append("eval.on_save evaluates saved checkpoints, but training.save_strategy is 'no'")
    if not ev.every_steps:
        return
    profile = recipe.launch.profile
    if recipe.launch.spec.shards_weights and (recipe.launch.num_processes or 2) > 1:
        pf.problems.append(Problem("eval.every_steps", f"evaluates on the main process alone, but launch.profile="
                                   f"{profile} shards the weights over the processes, so generating would wait "
                                   "forever for the others",
                                   "Drop eval.every_steps for sharded profiles (eval.before_after still works: it "
                                   "evaluates the saved model), or use `launch.profile=ddp` (or zero2)."))
    if ev.suite and ev.metric != "accuracy":
        pf.problems.append(Problem("eval.metric", f"a suite measures accuracy, not {ev.metric!r}",
                                   "Use eval.metric: accuracy with eval.suite, or drop eval.suite to score the eval "
                                   "split with a reward."))
    elif not ev.suite:
        labels = [e.label for e in (ev.rewards or recipe.rewards)]
        if ev.metric not in ("accuracy", "reward", *labels):
            pf.problems.append(Problem("eval.metric", f"{ev.metric!r} is not a reward of this recipe",
                                       f"Use accuracy, reward (the weighted total) or one of: {', '.join(labels)}."))
        if not recipe.data.has_eval:
            pf.problems.append(Problem("eval.every_steps", "scores the eval split, but the recipe has none",
                                       "Set data.eval_split or data.eval_holdout, or name a bundled suite in "
                                       "eval.suite."))
    pf.plan["task metric"] = (f"task/{ev.suite or 'eval'}/{ev.metric} every {ev.every_steps} steps, best kept in "
                              f"{recipe.output.dir}/best" + (f", early stop after {ev.early_stopping_patience} "
                                                              "evaluations without improvement"
                                                              if ev.early_stopping_patience else ""))


def preflight(recipe: Recipe) -> Preflight:
    """Check everything checkable without loading a model; never raises for recipe problems."""
    pf = Preflight(recipe)
    model_desc = _model_checks(recipe, pf)
    data_desc = _data_checks(recipe, pf)
    _reward_checks(recipe, pf)
    tools = _tool_checks(recipe, pf)
    _training_checks(recipe, pf)
    _trl_and_environment_checks(recipe, pf)
    pf.plan = _plan(recipe, pf, model_desc, data_desc)
    from grpo_cli.validation.template_override import template_checks

    problems, warnings = template_checks(recipe, pf.plan)
    pf.problems.extend(problems)
    pf.warnings.extend(warnings)
    _eval_checks(recipe, pf)
    _push_check(recipe, pf)
    vision_checks(recipe, pf)
    pf.plan.update({"tools": tools} if tools else {})
    _vllm_checks(recipe, pf)
    sampling_checks(recipe, pf)
    _memory(recipe, pf)
    return pf


def _vllm_checks(recipe: Recipe, pf: Preflight) -> None:
    """A model vLLM cannot serve is refused here, not at its first generate; the plan says vLLM's dtype."""
    if recipe.launch.vllm.mode == "off":
        return
    from grpo_cli.validation.async_checks import async_plan, async_problems
    from grpo_cli.validation.model_config import find_model_config
    from grpo_cli.validation.vllm_support import sampling_dtype, vllm_model_problems, vllm_runs_on_cpu

    config, _ = find_model_config(recipe)
    problems, warnings = vllm_model_problems(recipe, config)
    pf.problems.extend([*problems, *async_problems(recipe)])
    pf.warnings.extend(warnings)
    if recipe.launch.vllm.mode == "async":  # its staleness bound and correction, named
        pf.plan["async"] = async_plan(recipe, vllm_runs_on_cpu(recipe))
    dtype = sampling_dtype(recipe, config)
    pf.plan["vLLM"] = (f"{recipe.launch.vllm.mode} on {'CPU' if vllm_runs_on_cpu(recipe) else 'GPU'}, samples in "
                       + (f"{dtype} (training in {recipe.model.dtype}; TRL's importance-sampling correction "
                          "absorbs the difference)" if dtype else "the checkpoint's dtype (float32 -> bfloat16)"))


def _trl_and_environment_checks(recipe: Recipe, pf: Preflight) -> None:
    """What TRL would reject after loading (validation/trl_rules.py) and the optional packages the recipe uses."""
    from grpo_cli.validation.environment import recipe_problems
    from grpo_cli.validation.trl_rules import check_trl_rules, rule_input

    config = None
    if recipe.training.router_aux_loss_coef:  # the one rule that reads the model's config
        from grpo_cli.validation.model_config import find_model_config

        config, _ = find_model_config(recipe)
    problems, warnings = check_trl_rules(rule_input(recipe, config))
    pf.problems.extend(problems)
    pf.warnings.extend(warnings)
    problems, warnings = recipe_problems(recipe)
    pf.problems.extend(problems)
    pf.warnings.extend(warnings)
    from grpo_cli.validation.training_keys import eval_flag_problems, hub_problems, logging_warnings, scheduler_problems

    for problems, warnings in (scheduler_problems(recipe.training), hub_problems(recipe),
                               (eval_flag_problems(recipe), logging_warnings(recipe.training))):
        pf.problems.extend(problems)
        pf.warnings.extend(warnings)
    if recipe.callbacks:
        from grpo_cli.validation.callbacks import callback_problems

        pf.problems.extend(callback_problems(recipe))


def _memory(recipe: Recipe, pf: Preflight) -> None:
    """Add the memory plan (from the model's config, no weights loaded) and its warning."""
    from grpo_cli.validation.memory import memory_plan
    from grpo_cli.validation.topology import thread_plan, world_size_explanation

    pf.plan["launch"] = world_size_explanation(recipe) + f", vLLM {recipe.launch.vllm.mode}"
    pf.plan["threads"] = thread_plan(recipe).describe(sandboxes=any(e.name == "code" for e in recipe.rewards))
    from grpo_cli.threads import pool_workers

    pools = [f"{e.label}: {pool_workers(e.parallel)} process{'es' if pool_workers(e.parallel) != 1 else ''}"
             + (" (auto: the free cores; 1 means no pool)" if e.parallel == "auto" else "")
             for e in recipe.rewards if e.name != "code" and (e.parallel == "auto" or e.parallel > 1)]
    if pools:
        pf.plan["reward pools"] = "; ".join(pools)
    if recipe.launch.spec.cpu_only:
        return
    plan, why = memory_plan(recipe)
    if plan is None:
        pf.plan["memory per GPU"] = f"not estimated ({why})" if why else "not estimated"
        return
    pf.plan["memory per GPU"] = (f"~{plan.total_gb:.1f} GiB, model shape from {plan.source} "
                                 "(`grpo memory` shows the breakdown)")
    if plan.warning:
        pf.warnings.append(plan.warning)


def _plan(recipe: Recipe, pf: Preflight, model_desc: str, data_desc: str) -> dict[str, Any]:
    m = recipe.model
    tuning = f"LoRA r={m.lora.r} alpha={m.lora.alpha}" if m.lora else "full fine-tune"
    if m.quantization:
        tuning += f" on a {m.quantization} base"
    plan: dict[str, Any] = {
        "model": f"{model_desc} (dtype {m.dtype}, {tuning})",
        "data": data_desc,
        "prompt": recipe.data.describe_prompt(),
        "rewards": ", ".join(f"{r.label} x{e.weight:g}" for r, e in zip(pf.rewards, recipe.rewards, strict=False))
                   or "the environment's get_reward x1",
        "launch": f"profile {recipe.launch.profile}, {recipe.launch.world_size} training process(es), "
                  f"vLLM {recipe.launch.vllm.mode}",
        "output": recipe.output.dir,
    }
    if pf.train_rows is not None:
        plan["train rows"] = pf.train_rows
    if pf.eval_rows:
        plan["eval rows"] = pf.eval_rows
    b = pf.batches
    if b is not None:
        plan["completions per micro-step"] = f"{b.global_batch} ({b.per_device} per device x {b.world_size})"
        every = "micro-step" if b.steps_per_generation == 1 else f"{b.steps_per_generation} micro-steps"
        plan["generation batch"] = (f"{b.generation_batch_size} completions = {b.prompts_per_generation} prompts x "
                                    f"{b.num_generations} generations, every {every}")
        plan["completions per optimizer step"] = b.completions_per_optimizer_step
        max_steps = recipe.training.max_steps
        if max_steps > 0:
            plan["total optimizer steps"] = max_steps
        if pf.train_rows:
            per_epoch = b.optimizer_steps_per_epoch(pf.train_rows)
            plan["optimizer steps per epoch"] = per_epoch
            epochs = recipe.training.num_train_epochs
            plan["total optimizer steps"] = max_steps if max_steps > 0 else int(per_epoch * epochs)
    return plan

