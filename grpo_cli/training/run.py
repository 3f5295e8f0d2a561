"""`grpo train`: build TRL's GRPOTrainer from a recipe and run it.

Order matters: everything that can fail cheaply (preflight, output dir policy) happens
before the model loads, and nothing is written until those checks pass.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.artefacts.hub import finish_run_card
from grpo_cli.artefacts.report import report_after_training
from grpo_cli.artefacts.summary import one_log_note, run_summary
from grpo_cli.data import prepare_data
from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.task import EvalTask, evaluate_loaded
from grpo_cli.launching.vllm_server import server_base_url, wait_for_server
from grpo_cli.models import load_model, load_source_model, record_base_reference, resolve_model_source
from grpo_cli.paths import share_weights
from grpo_cli.planning import RunPlan, plan_run
from grpo_cli.progress import quiet_libraries
from grpo_cli.recipe.loader import dump_yaml
from grpo_cli.recipe.schema import Recipe
from grpo_cli.rewards import build_reward_funcs
from grpo_cli.runs.lock import LOCKED_ENV, RunLock, mark_if_killed
from grpo_cli.runs.manifest import Scores, start_manifest
from grpo_cli.threads import apply_torch_threads
from grpo_cli.tools import load_toolset
from grpo_cli.training.async_grpo import async_config
from grpo_cli.training.config import grpo_config_kwargs, tracking_environment
from grpo_cli.training.heap import prepare_allocators
from grpo_cli.training.run_state import RunState, TrainResult, is_main_process, say
from grpo_cli.training.time_record import planned_time, record_time
from grpo_cli.training.trainer import make_trainer

if TYPE_CHECKING:
    from rich.console import Console


def train(recipe: Recipe, plan: RunPlan | None = None, *, output_dir: str | Path | None = None,
          resume: bool | str | None = None, force: bool = False, console: Console | None = None,
          resume_command: str | None = None) -> TrainResult:
    """Load and train by `plan`; returns when training ends, is stopped, or is interrupted.

    `plan`: the run's decisions, made once before it starts (`grpo train` and `grpo_cli.train` build it after
    `grpo validate`'s checks, train_command.py), and its recipe is the one that runs (`launch.vllm.mode: auto`
    made concrete); without one it is decided here from `recipe`, unchecked.
    The output directory is locked for the whole run. `resume_command` is the command printed to
    continue an interrupted run (default: the recipe with `-o OUT --resume`).
    """
    if plan is None:  # the threads from the cores free now (a short sample), as `grpo train`'s plan has them
        plan = plan_run(recipe, sample_threads=True)
    recipe, threads = plan.recipe, plan.threads  # `launch.vllm.mode: auto` made concrete, as the plan showed it
    out = Path(output_dir or recipe.output.dir)
    # The main process locks, unless the `grpo train` that launched it holds the lock already.
    lock = RunLock(out).acquire() if is_main_process() and not os.environ.get(LOCKED_ENV) else None
    try:
        run = _prepare(recipe, out, resume, force, console)
        run.resume_command, run.threads = resume_command, threads
        run.manifest.time_plan = planned_time(plan)
        try:
            _build(run)
            _fit(run)
            result = _finish(run)
        except BaseException as exc:
            _mark_failed(run, exc)  # e.g. the trainer could not be built: the manifest must not say `running`
            if run.aside is not None:
                run.aside.restore()  # the new run failed before its first step: the previous one comes back
            raise
        from grpo_cli.training.sharding import leave_together

        leave_together()
        return result
    finally:
        if lock is not None:
            lock.release()


def _prepare(recipe: Recipe, out: Path, resume: bool | str | None, force: bool, console: Console | None) -> RunState:
    """Everything that can fail cheaply, before any model loads and before anything is written.

    A manifest still saying `running` in a directory whose lock this process now holds belongs to
    a run that died without a word: it is recorded as `killed` first.
    """
    if is_main_process() and (killed := mark_if_killed(out, lock_held=True)) is not None:
        step = "unknown" if killed.global_step is None else killed.global_step
        say(console, f"note: the run in {out} ended without recording why (last recorded step {step}); its "
                      "manifest now says `killed`")
    plan = runs.plan_output_dir(out, resume=resume, force=force, policy=recipe.output.overwrite)
    for path, why in plan.skipped:
        say(console, f"skipping {path.name}: {why}")
    for note in plan.notes:
        say(console, f"note: {note}")
    if plan.checkpoint is not None:
        runs.check_resume_compatible(out, name_or_path=recipe.model.name_or_path, lora=bool(recipe.model.lora))
        say(console, f"resuming from {plan.checkpoint.name} (step {runs.saved_step(plan.checkpoint)})")
    if recipe.launch.vllm.uses_server and is_main_process():
        wait_for_server(server_base_url(recipe), recipe.launch.vllm.server_timeout, recipe_source=recipe.source)
    return RunState(recipe, out, console, plan.checkpoint, plan.replace)


def _announce(run: RunState) -> None:
    """The run's first lines, before the seconds of importing torch and TRL."""
    if run.console is None or not is_main_process():
        return
    steps = run.recipe.training.max_steps
    run.console.print(f"[bold]grpo train[/] {run.recipe.source or 'recipe'}: {run.recipe.model.name_or_path} "
                      f"-> {run.out}" + (f", {steps} steps" if steps > 0 else ""), soft_wrap=True)
    say(run.console, "threads: " + run.threads.describe(sandboxes=any(e.name == "code" for e in run.recipe.rewards)))
    say(run.console, "importing torch, transformers and TRL")


def _build(run: RunState) -> None:
    """Load model, data and rewards, then (only now) replace an old run and write recipe and manifest."""
    _announce(run)
    apply_torch_threads(run.threads)
    prepare_allocators(run.recipe)  # before the first CUDA allocation and the first step
    import warnings

    # transformers 5 warns on every run that TRL's `gradient_checkpointing` is an alias; not the user's doing.
    warnings.filterwarnings("ignore", message=".*(gradient_checkpointing|is_gradient_checkpointing).*deprecated",
                            category=FutureWarning)
    from grpo_cli.training.sharding import adopt_fsdp_on_cpu, skip_deepspeed_cpu_inference_op

    skip_deepspeed_cpu_inference_op()  # before GRPOConfig starts DeepSpeed's communication backend
    recipe, out, console = run.recipe, run.out, run.console
    quiet_libraries()
    say(console, f"loading model {recipe.model.name_or_path}")
    run.loaded = load_model(recipe)
    say(console, "loading data" + (f" ({recipe.data.dataset})" if recipe.data.dataset else ""))
    run.data = prepare_data(recipe, run.loaded.processing_class)
    run.reward_funcs = build_reward_funcs(recipe)
    run.toolset = load_toolset(recipe)

    os.environ.update(tracking_environment(recipe))  # W&B / TensorBoard read their settings from the environment
    config = _trainer_config(recipe, out, run.loaded.dtype, run.loaded.device)
    _ = config.device  # GRPOConfig (re)creates accelerate's state here; FSDP on CPU must come after it
    adopt_fsdp_on_cpu()
    _start_run_dir(run, config.seed)
    run.result = TrainResult(out, "running", 0, data_stats=run.data.stats)
    if _held_out(run) and is_main_process() and run.ckpt is None:
        run.result.eval_before = evaluate_loaded(EvalTask.for_recipe(recipe), run.loaded.model,
                                                 run.loaded.processing_class, run.data.eval, console,
                                                 label="before training")
        if console is not None:  # the number to beat, now rather than only in the final table
            headline = {k: v for k, v in run.result.eval_before.summary().items()
                        if k in ("pass@1", "accuracy", "reward/mean") and isinstance(v, float)}
            console.print("before training: " + ", ".join(f"{k} {v:.4f}" for k, v in headline.items()),
                          markup=False)
    say(console, "starting TRL's " + ("AsyncGRPOTrainer" if recipe.launch.vllm.mode == "async" else "GRPOTrainer"))
    run.trainer = make_trainer(run, config)


def _trainer_config(recipe: Recipe, out: Path, dtype: str, device: str) -> Any:
    """TRL's GRPOConfig for the recipe (AsyncGRPOConfig in async mode), with TRL's refusal as a paragraph."""
    kwargs = grpo_config_kwargs(recipe, out, dtype, device)
    if recipe.launch.vllm.mode == "async":
        return async_config(recipe, kwargs, dtype)
    from trl import GRPOConfig

    try:
        return GRPOConfig(**kwargs)
    except (ValueError, TypeError) as exc:
        raise GrpoError(f"TRL rejected the training settings: {str(exc).splitlines()[0]}", where="training",
                        fix="Fix the named training key; `grpo validate` checks most of these up front.") from None


def _start_run_dir(run: RunState, seed: int) -> None:
    """Set the previous run aside (only now that everything loaded) and write recipe.yaml and the manifest.

    A resumed run first drops what was logged after its checkpoint (a hard kill leaves that behind).
    """
    out = run.out
    if is_main_process():
        if run.replace:
            run.aside = runs.SetAside(out)  # deleted after the first step, restored if the run fails before it
        out.mkdir(parents=True, exist_ok=True)
        if run.ckpt is not None:
            runs.truncate_step_logs(out, runs.saved_step(run.ckpt))
        (out / runs.RECIPE).write_text(dump_yaml(run.recipe.model_dump(mode="json")), encoding="utf-8")
    plan = run.manifest.time_plan
    run.manifest = manifest = start_manifest(run.recipe.source, seed, run.recipe.launch.world_size)
    manifest.time_plan = plan
    manifest.output_dir, manifest.resumed_from = str(out), str(run.ckpt) if run.ckpt else None
    manifest.data, manifest.dtype, manifest.device = run.data.stats, run.loaded.dtype, run.loaded.device
    manifest.threads = run.threads.describe()
    if is_main_process():
        runs.write_manifest(out, manifest)


def _held_out(run: RunState) -> bool:
    """eval.before_after applies: a suite, or an eval split to score."""
    return run.recipe.eval.before_after and (run.data.eval is not None or run.recipe.eval.suite is not None)


def _fit(run: RunState) -> None:
    """Train; on any failure mark the manifest failed and still write the report."""
    assert run.trainer is not None
    run.stopper.install()
    try:
        run.trainer.train(resume_from_checkpoint=str(run.ckpt) if run.ckpt else None)
    except BaseException as exc:
        _mark_failed(run, exc)
        if is_main_process() and (run.out / runs.METRICS).is_file():  # a step-0 failure has no curves
            report_after_training(run.out, run.console)
        raise
    finally:
        run.stopper.uninstall()
        for f in run.reward_funcs:
            if hasattr(f, "close"):
                f.close()


def _mark_failed(run: RunState, exc: BaseException) -> None:
    """Record a run that stopped on an error as `failed`, with the error's first line as its message."""
    if run.manifest.status != "running":
        return  # nothing written yet, or already recorded

    message = exc.render() if isinstance(exc, GrpoError) else f"{type(exc).__name__}: {exc}"
    step = run.trainer.state.global_step if run.trainer is not None else 0
    run.manifest.end("failed", step, (message.splitlines() or [""])[0][:500])
    if is_main_process():
        runs.write_manifest(run.out, run.manifest)


def _finish(run: RunState) -> TrainResult:
    """Decide how the run ended, save the model of a completed run, evaluate it, write manifest and report."""
    from grpo_cli.training.sharding import gather_layout

    recipe, out, trainer, result = run.recipe, run.out, run.trainer, run.result
    assert result is not None and trainer is not None
    layout = gather_layout(run.probe)  # a collective: every process gets here
    if layout:
        run.manifest.distributed, run.manifest.world_size = layout, layout["world_size"]
    result.global_step = trainer.state.global_step
    if run.toolset is not None:
        run.manifest.tools = run.toolset.summary()
    result.metrics = run.metrics.records
    result.summary = run_summary(run.metrics.records)
    result.time_check = record_time(run, is_main_process())
    stop_reason = next((r for c in run.callbacks if (r := getattr(c, "reason", None))), "")
    if run.stopper.received is not None:
        result.status = "interrupted"
        command = run.resume_command or shlex.join(["grpo", "train", str(recipe.source or "RECIPE"), "-o", str(out),
                                                     "--resume"])
        result.message = (f"{run.stopper.signal_name} received: saved checkpoint-{result.global_step} in {out}; "
                          f"continue with `{command}`.")
    elif stop_reason:
        result.status = "stopped"
        result.message = stop_reason
    else:
        result.status = "completed"
        result.message = next((m for c in run.callbacks if (m := getattr(c, "early_stop_message", ""))), "")
    result.note = one_log_note(sum(1 for r in result.metrics if "reward" in r), result.status,
                               recipe.training.logging_steps, resumed=run.ckpt is not None)
    if result.status == "completed":
        say(run.console, f"saving the model to {out}")
        trainer.save_model(str(out))
        if is_main_process():
            run.loaded.processing_class.save_pretrained(str(out))
            record_base_reference(out, recipe)
        if _held_out(run) and is_main_process():
            # sharded: only every rank together can generate; async: the trainer's model has packed attention
            sharded = layout.get("sharded") or recipe.launch.vllm.mode == "async"
            model = _saved_model(run) if sharded else trainer.model
            result.eval_after = evaluate_loaded(EvalTask.for_recipe(recipe), model, run.loaded.processing_class,
                                                run.data.eval, run.console, label="after training")
    run.manifest.end(result.status, result.global_step, result.message)
    run.manifest.eval_before = Scores(result.eval_before.summary()) if result.eval_before else None
    run.manifest.eval_after = Scores(result.eval_after.summary()) if result.eval_after else None
    if is_main_process():
        share_weights(out)
        runs.write_manifest(out, run.manifest)
        report_after_training(out, run.console)
        if result.status == "completed":
            finish_run_card(recipe, out, run.console)
    return result


def _saved_model(run: RunState) -> Any:
    """The model just saved in the run directory, loaded whole: a sharded model can only generate with
    every rank taking part, so rank 0 evaluates the saved copy instead (which also proves it loads)."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()  # training is over: load whole weights here, not ZeRO-3 partitions (zero.Init)
    source = resolve_model_source(str(run.out), where="output.dir")
    return load_source_model(source, dtype=run.loaded.dtype, trust_remote_code=run.recipe.model.trust_remote_code)
