"""What `grpo validate` checks before any model loads, and the plan it prints.

- checks.py: `preflight(recipe)` -> `Preflight` (outcome.py: problems, warnings, plan): `CHECKS`, the one ordered
  list of checks, each `check(recipe, pf) -> Findings` in the module of its concern (model_checks, data_checks,
  training_checks, eval_checks, trl_rules, training_keys, callbacks, template_override, vision, sampling, ...).
- batching.py: TRL's batch arithmetic for the real world size (the one list of batch keys).
- topology.py: visible GPUs and the number of training processes, with the reason.
- memory.py: the per-GPU memory plan from the model's shape.
- shapes.py / model_config.py: the shape from config.json; where the config comes from (local, HF cache,
  the recipe's `model.shape`, the shipped table assets/model_shapes.json).
- trl_rules.py: TRL 1.16's raise sites that the recipe decides, one declarative rule each.
- environment.py: TRL's version windows and the optional packages a recipe needs (read from metadata).
- doctor.py: `grpo doctor`: installed packages, torch build and GPUs against those windows.
- vllm_support.py: whether vLLM can serve the model (head sizes on CPU, its registry) and its sampling dtype.
- generation_choice.py: transformers or vLLM colocate on a CPU, estimated; `launch.vllm.mode: auto` made concrete.
Nothing here imports torch except when a GPU count is really needed (and `grpo doctor`'s device probe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports
from grpo_cli.validation.batching import BatchPlan, plan_batches
from grpo_cli.validation.checks import preflight
from grpo_cli.validation.generation_choice import choose_backend
from grpo_cli.validation.outcome import Preflight
from grpo_cli.validation.topology import resolve_num_processes, thread_plan, visible_gpu_count, world_size_explanation

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.validation.memory import MemoryPlan, memory_plan

__all__ = [
    "BatchPlan", "MemoryPlan", "Preflight", "choose_backend", "memory_plan", "plan_batches", "preflight",
    "resolve_num_processes", "thread_plan", "visible_gpu_count", "world_size_explanation",
]

__getattr__ = lazy_exports(__name__)
