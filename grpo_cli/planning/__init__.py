"""Planning: every launch decision of a run, made once before it starts (`RunPlan`, run_plan.py).

- run_plan.py: `plan_run(recipe)` -> `RunPlan`: the backend and why, the processes and why, the batch plan, the
  threads, the memory plan, the generation path and the CPU generation estimate, each decided once.
- batching.py: TRL's batch arithmetic for the real world size (the one list of batch keys).
- topology.py: visible GPUs, the number of training processes with the reason, the threads per process.
- memory.py: the per-GPU memory plan from the model's shape; image_tokens.py: what a VLM prompt's images add.
- shapes.py / model_config.py: the shape from config.json; where the config comes from (local, HF cache,
  the recipe's `model.shape`, the shipped table assets/model_shapes.json).
- generation_choice.py: transformers or vLLM colocate on a CPU, estimated; `launch.vllm.mode: auto` made concrete.
- fast_generation.py: which transformers generation path a run takes (merged adapter, static cache), and why.
- vllm_support.py: whether vLLM can serve the model (head sizes on CPU, its registry) and its sampling dtype.
- async_mode.py: what async mode (TRL's AsyncGRPOTrainer) supports, and its epsilons.
`grpo_cli.validation` reports these decisions and checks the recipe; training, launching and evaluation read
them here. Nothing here imports torch except when a GPU count is really needed.
"""

from __future__ import annotations

from grpo_cli.planning.batching import BatchPlan, plan_batches
from grpo_cli.planning.generation_choice import choose_backend
from grpo_cli.planning.memory import MemoryPlan, memory_plan
from grpo_cli.planning.run_plan import RunPlan, plan_run
from grpo_cli.planning.topology import resolve_num_processes, thread_plan, visible_gpu_count, world_size_explanation

__all__ = [
    "BatchPlan", "MemoryPlan", "RunPlan", "choose_backend", "memory_plan", "plan_batches", "plan_run",
    "resolve_num_processes", "thread_plan", "visible_gpu_count", "world_size_explanation",
]
