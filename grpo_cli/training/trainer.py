"""TRL's GRPOTrainer as `grpo train` builds it: grpo's callbacks around the recipe's own, and grpo's hooks into
TRL from their one list (training/hooks/), before TRL builds the trainer and on the built one."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from grpo_cli import runs, trl_compat
from grpo_cli.training.async_grpo import make_async_trainer
from grpo_cli.training.hooks import Build, attach_hooks
from grpo_cli.training.run_state import say
from grpo_cli.training.step_timing import step_timer
from grpo_cli.training.user_callbacks import load_callbacks

if TYPE_CHECKING:
    from trl import GRPOConfig, GRPOTrainer

    from grpo_cli.training.callbacks import TrainerBound
    from grpo_cli.training.run_state import RunState
    from grpo_cli.trl_compat import AsyncGRPOConfig, AsyncGRPOTrainer


def make_trainer(run: RunState, config: GRPOConfig | AsyncGRPOConfig) -> GRPOTrainer | AsyncGRPOTrainer:
    """TRL's GRPOTrainer (AsyncGRPOTrainer in async mode) with grpo's callbacks (metrics, graceful stop, console,
    health guards)."""
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_cli.training.callbacks import GracefulStop, MetricsJsonl, OnFirstStep, RichConsole, ToolResultCuts
    from grpo_cli.training.learning_guards import all_health_callbacks
    from grpo_cli.training.sharding import ShardingProbe

    recipe = run.recipe
    run.metrics = MetricsJsonl(run.out / runs.METRICS)
    run.stopper = GracefulStop()
    run.probe = ShardingProbe(evaluates_during_training=bool(recipe.eval.every_steps))
    timer = step_timer()
    run.callbacks = [timer, run.probe, run.metrics, run.stopper,
                     RichConsole(run.console, show_kl=recipe.training.beta > 0)]
    if run.toolset is not None:  # first: the writers and the console see the key it adds
        run.callbacks.insert(0, ToolResultCuts(run.toolset.stats))
    if run.aside is not None:
        run.callbacks.append(OnFirstStep(run.aside.discard))
    run.callbacks += all_health_callbacks(recipe, run.out, console=run.console)
    from grpo_cli.training.task_metric import run_callbacks

    extras = run_callbacks(recipe, run.out, run.manifest, run.loaded.processing_class, run.data.eval, run.console)
    run.callbacks += extras
    run.callbacks += load_callbacks(recipe)  # the recipe's own, after grpo's (they see the same events)
    if recipe.launch.vllm.mode == "async":  # TRL's AsyncGRPOTrainer: its own step, so no step timer
        run.callbacks.remove(timer)
        return _async_trainer(run, config, extras)
    assert isinstance(config, GRPOConfig)
    data, build = run.data, Build(run, trainer_class=GRPOTrainer, timer=timer)
    attach_hooks("before_build", "sync", build, partial(say, run.console))  # vLLM's CPU build, the resumable sampler
    assert build.trainer_class is not None
    trainer = build.trainer_class(model=run.loaded.model, reward_funcs=run.reward_funcs, args=config,
                                  train_dataset=data.train,
                                  eval_dataset=data.eval if config.eval_strategy != "no" else None,
                                  processing_class=run.loaded.processing_class,
                                  peft_config=run.loaded.peft_config, callbacks=run.callbacks,
                                  **(run.toolset.trainer_kwargs() if run.toolset else {}))
    trainer.remove_callback(PrinterCallback)  # grpo prints its own compact line per log
    build.trainer = trainer
    attach_hooks("built", "sync", build, partial(say, run.console))  # training/hooks/table.py: fused IS ... `sampling:`
    for extra in extras:  # they read the trainer's logs, log through it and save best/ with it
        extra.trainer = trainer
    return trainer


def _async_trainer(run: RunState, config: GRPOConfig | AsyncGRPOConfig,
                   extras: list[TrainerBound]) -> AsyncGRPOTrainer:
    """launch.vllm.mode async: TRL's AsyncGRPOTrainer with the callbacks already in run.callbacks."""
    assert isinstance(config, trl_compat.async_classes()[0])  # training/run.py builds it for this mode
    build = Build(run)
    attach_hooks("before_build", "async", build, partial(say, run.console))  # the CPU attention and MFU
    trainer = make_async_trainer(run, config)
    build.trainer = trainer
    attach_hooks("built", "async", build, partial(say, run.console))  # the rollout worker's Ctrl-C and shutdown
    for extra in extras:  # they read the trainer's logs, log through it and save best/ with it
        extra.trainer = trainer
    return trainer

