"""TRL's GRPOTrainer as `grpo train` builds it: grpo's callbacks around the recipe's own, and grpo's hooks on the
instance (the step time split, the shared prefill, `sampling:`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli import runs
from grpo_cli.training.async_grpo import make_async_trainer
from grpo_cli.training.compiled_decode import allow_compile
from grpo_cli.training.dynamic_sampling import attach_sampling
from grpo_cli.training.fused_is import fuse_importance_sampling
from grpo_cli.training.merged_generation import attach_merged_generation
from grpo_cli.training.sampler import resumable
from grpo_cli.training.shared_prefill import share_prompt_prefill
from grpo_cli.training.step_timing import step_timer
from grpo_cli.training.user_callbacks import load_callbacks
from grpo_cli.training.vllm_cpu import vllm_on_cpu
from grpo_cli.validation.fast_generation import generation_path

if TYPE_CHECKING:
    from trl import GRPOConfig, GRPOTrainer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from grpo_cli.training.callbacks import TrainerBound
    from grpo_cli.training.run_state import RunState


def make_trainer(run: RunState, config: GRPOConfig | AsyncGRPOConfig) -> GRPOTrainer | AsyncGRPOTrainer:
    """TRL's GRPOTrainer (AsyncGRPOTrainer in async mode) with grpo's callbacks (metrics, graceful stop, console,
    health guards)."""
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_cli.training.callbacks import GracefulStop, MetricsJsonl, OnFirstStep, RichConsole, ToolResultCuts
    from grpo_cli.training.health_signal import all_health_callbacks
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
    data = run.data
    with vllm_on_cpu(recipe.launch.vllm.mode, run.loaded.device):  # vLLM's CPU build: environment and weight sync
        trainer = resumable(GRPOTrainer)(model=run.loaded.model, reward_funcs=run.reward_funcs, args=config,
                                         train_dataset=data.train,
                                         eval_dataset=data.eval if config.eval_strategy != "no" else None,
                                         processing_class=run.loaded.processing_class,
                                         peft_config=run.loaded.peft_config, callbacks=run.callbacks,
                                         **(run.toolset.trainer_kwargs() if run.toolset else {}))
    trainer.remove_callback(PrinterCallback)  # grpo prints its own compact line per log
    fuse_importance_sampling(trainer)  # with vLLM: the mismatch correction from the loss forward, not an extra one
    timer.attach(trainer)
    share_prompt_prefill(trainer.model)  # a group's prompt prefilled once, not num_generations times
    path = generation_path(recipe, cuda=run.loaded.device.startswith("cuda"))
    attach_merged_generation(trainer, path)  # after the prefill: merged around it, so it prefills merged too
    allow_compile(trainer, path)  # the static cache's decode compiled (CUDA); TRL hard-codes disable_compile
    attach_sampling(trainer, recipe)  # `sampling:` (off by default: then nothing is wrapped)
    for extra in extras:  # they read the trainer's logs, log through it and save best/ with it
        extra.trainer = trainer
    return trainer


def _async_trainer(run: RunState, config: GRPOConfig | AsyncGRPOConfig,
                   extras: list[TrainerBound]) -> AsyncGRPOTrainer:
    """launch.vllm.mode async: TRL's AsyncGRPOTrainer with the callbacks already in run.callbacks."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    assert isinstance(config, AsyncGRPOConfig)  # training/run.py builds it for this mode
    trainer = make_async_trainer(run, config)
    for extra in extras:  # they read the trainer's logs, log through it and save best/ with it
        extra.trainer = trainer
    return trainer
