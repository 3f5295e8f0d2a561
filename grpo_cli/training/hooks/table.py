"""Every patch grpo applies to TRL, in one ordered list (`HOOKS`): what each replaces, the TRL it was verified on,
the recipe feature that needs it, and whether it is an optimisation (the same update, faster), a measurement or a
feature (something TRL alone does not do).

The order is the stacking order: where two hooks wrap one method (`_generate_and_score_completions` is wrapped by
fused_is, then step_timing, then dynamic_sampling), the later one wraps the earlier, so the last in the list runs
first. The code of each hook stays in the module of its concern (`module`); this list only calls it.
`tests/training/test_trl_hooks.py` pins the order and resolves every replaced name on the installed TRL.

Not TRL's, so not here: sharding.py's two process-wide changes (accelerate's shared state made FSDP on CPU,
DeepSpeed's shared-memory op marked incompatible), which run.py applies before GRPOConfig, and heap.py /
cuda_segments.py, which set the C and CUDA allocators.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from grpo_cli import trl_compat
from grpo_cli.planning.fast_generation import GenerationPath, generation_path
from grpo_cli.training.async_cpu import patch_trl_for_cpu
from grpo_cli.training.async_worker import quiet_rollout_worker
from grpo_cli.training.compiled_decode import allow_compile
from grpo_cli.training.dynamic_sampling import attach_dynamic_sampling
from grpo_cli.training.fused_is import correct_trl_ratio, fuse_importance_sampling
from grpo_cli.training.merged_generation import attach_merged_generation
from grpo_cli.training.resumable_sampler import resumable
from grpo_cli.training.shared_prefill import share_prompt_prefill
from grpo_cli.training.shared_prompt_forward import share_prompt_forward
from grpo_cli.training.vllm_cpu import vllm_on_cpu
from grpo_cli.training.zero_advantage import attach_zero_advantage_skip

if TYPE_CHECKING:
    from grpo_cli.training.run_state import RunState

Kind = Literal["optimisation", "measurement", "feature"]
"""optimisation and measurement hooks are skipped on an unverified TRL (the run trains as TRL does); a feature's
hook is refused there, when the recipe uses the feature."""
Stage = Literal["before_build", "built"]
Trainer = Literal["sync", "async"]
GRPO = "trl.GRPOTrainer."
ASYNC = "trl.experimental.async_grpo."
VLLM_GENERATION = "trl.generation.vllm_generation."


@dataclass
class Build:
    """What the hooks work on: the run, TRL's trainer class before it is built, the trainer once it is."""

    run: RunState
    trainer_class: type | None = None
    trainer: Any = None
    timer: Any = None  # training/step_timing.py's callback, already among run.callbacks
    path: GenerationPath | None = None  # how a step generates, decided once (`generation`)

    def generation(self) -> GenerationPath:
        """The generation path of this run (merged adapter, static cache/compiled decode), decided once."""
        if self.path is None:
            self.path = _generation_path(self.run)
        return self.path


@dataclass(frozen=True)
class Hook:
    """One patch of TRL: what it replaces, on which TRL it was verified, who needs it, and how it is applied."""

    name: str
    module: str  # the grpo module that holds it
    replaces: tuple[str, ...]  # qualified names in the installed TRL (and the libraries TRL calls)
    needed_by: str  # the recipe key (or flag) whose behaviour depends on it
    kind: Kind
    stage: Stage
    trainer: Trainer
    used: Callable[[RunState], bool]  # whether this run relies on it (only asked on an unverified TRL)
    apply: Callable[[Build], None]
    verified: tuple[trl_compat.Release, trl_compat.Release] = trl_compat.VERIFIED_RANGE


def _generation_path(run: RunState) -> GenerationPath:
    return generation_path(run.recipe, cuda=run.loaded.device.startswith("cuda"))


def _vllm_on(run: RunState) -> bool:
    return run.recipe.launch.vllm.mode in ("server", "colocate")


def _vllm_cpu(b: Build) -> None:
    vllm_on_cpu(b.run.recipe.launch.vllm.mode, b.run.loaded.device)


def _resumable(b: Build) -> None:
    b.trainer_class = resumable(b.trainer_class)  # type: ignore[arg-type]


def _async_cpu(b: Build) -> None:
    if b.run.loaded.device == "cpu":
        patch_trl_for_cpu()


def _shared_prompt_forward(b: Build) -> None:
    if b.run.recipe.sampling.share_prompt_forward:  # before fused_is, which reads the loss forward's log-probs
        share_prompt_forward(b.trainer)


def _fused_is(b: Build) -> None:
    # the correction from the loss forward where it is exact (`fusable`; GRPO_FUSED_IS=0 keeps TRL's forward), else
    # TRL's own with its raw ratio logged; either renormalised over the kept tokens when top_p/top_k/min_p truncate
    # vLLM's sampling (TRL 1.17's fix, which TRL 1.16 lacks)
    fuse_importance_sampling(b.trainer) or correct_trl_ratio(b.trainer)


def _timer(b: Build) -> None:
    b.timer.attach(b.trainer)


def _shared_prefill(b: Build) -> None:
    share_prompt_prefill(b.trainer.model)  # GRPO_SHARED_PREFILL=0 turns it off


def _merged_generation(b: Build) -> None:
    attach_merged_generation(b.trainer, b.generation())  # after the prefill: merged around it, so it prefills merged


def _compiled_decode(b: Build) -> None:
    allow_compile(b.trainer, b.generation())  # the static cache's decode compiled (CUDA): TRL sets disable_compile


def _dynamic_sampling(b: Build) -> None:
    attach_dynamic_sampling(b.trainer, b.run.recipe, b.run.console)  # nothing wrapped unless the recipe asks


def _zero_advantage(b: Build) -> None:
    if b.run.recipe.sampling.skip_zero_advantage:
        attach_zero_advantage_skip(b.trainer)


def _rollout_worker(b: Build) -> None:
    if b.trainer.rollout_worker is not None:  # Ctrl-C goes to grpo's handler; the worker stops in a second, not 15
        quiet_rollout_worker(b.trainer.rollout_worker)


HOOKS: tuple[Hook, ...] = (
    Hook("vllm_cpu", "training/vllm_cpu.py",
         (VLLM_GENERATION + "VLLMClient", VLLM_GENERATION + "VLLMGeneration.sync_weights"),
         "launch.vllm.mode", "feature", "before_build", "sync",
         lambda run: _vllm_on(run) and run.loaded.device == "cpu", _vllm_cpu),
    Hook("resumable_sampler", "training/resumable_sampler.py",
         (GRPO + "_get_train_sampler", "trl.trainer.utils.RepeatSampler"),
         "--resume", "feature", "before_build", "sync", lambda run: run.ckpt is not None, _resumable),
    Hook("async_cpu", "training/async_cpu.py",
         (ASYNC + "packing._flash_attn", ASYNC + "async_grpo_trainer.get_peak_flops_per_device"),
         "launch.vllm.mode", "feature", "before_build", "async", lambda run: run.loaded.device == "cpu", _async_cpu),
    Hook("shared_prompt_forward", "training/shared_prompt_forward.py",
         (GRPO + "_get_per_token_logps_and_entropies", "trl.trainer.utils.add_fused_lm_head",
          "transformers.DynamicCache.reorder_cache"),
         "sampling.share_prompt_forward", "optimisation", "built", "sync",
         lambda run: run.recipe.sampling.share_prompt_forward, _shared_prompt_forward),
    Hook("fused_is", "training/fused_is.py",
         (GRPO + "_generate_and_score_completions", GRPO + "_compute_loss",
          GRPO + "_get_per_token_logps_and_entropies"),
         "launch.vllm.mode", "optimisation", "built", "sync", _vllm_on,
         _fused_is),
    Hook("step_timing", "training/step_timing.py",
         (VLLM_GENERATION + "VLLMGeneration.sync_weights", GRPO + "_generate", GRPO + "_calculate_rewards",
          GRPO + "_generate_and_score_completions", GRPO + "compute_loss", "accelerate.Accelerator.backward"),
         "time/* in metrics.jsonl", "measurement", "built", "sync", lambda run: True, _timer),
    Hook("shared_prefill", "training/shared_prefill.py",
         (GRPO + "_generate_single_turn", "transformers.GenerationMixin.generate"),
         "launch.vllm.mode", "optimisation", "built", "sync", lambda run: run.recipe.launch.vllm.mode == "off",
         _shared_prefill),
    Hook("merged_generation", "training/merged_generation.py",
         (GRPO + "_generate_single_turn", "transformers.GenerationMixin.generate"),
         "model.lora", "optimisation", "built", "sync", lambda run: _generation_path(run).merge, _merged_generation),
    Hook("compiled_decode", "training/compiled_decode.py",
         (GRPO + "__init__", "transformers.GenerationMixin.generate"),  # TRL's disable_compile, set in __init__
         "sampling.compiled_decode", "optimisation", "built", "sync", lambda run: _generation_path(run).compiled,
         _compiled_decode),
    Hook("dynamic_sampling", "training/dynamic_sampling.py",
         (GRPO + "_generate_and_score_completions", GRPO + "_calculate_rewards"),
         "sampling.dynamic", "feature", "built", "sync", lambda run: run.recipe.sampling.dynamic is not None,
         _dynamic_sampling),
    Hook("zero_advantage", "training/zero_advantage.py", (GRPO + "compute_loss",),
         "sampling.skip_zero_advantage", "optimisation", "built", "sync",
         lambda run: run.recipe.sampling.skip_zero_advantage, _zero_advantage),
    # Ctrl-C stops the rollout worker in a second instead of TRL's 15: skippable, the run trains the same without it
    Hook("rollout_worker", "training/async_worker.py",
         (ASYNC + "async_rollout_worker.AsyncRolloutWorker.start",
          ASYNC + "async_rollout_worker.AsyncRolloutWorker.stop"),
         "launch.vllm.mode", "optimisation", "built", "async", lambda run: True, _rollout_worker),
)
