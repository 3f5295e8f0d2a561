"""Training: recipe -> TRL GRPOTrainer, run on CPU, one GPU or many processes through accelerate.

Every module of the package, by concern (docs/architecture.md has the longer account):

- The run: run.py (`train(recipe, plan)` in named phases: prepare, build the trainer, train, finish, acting on
  the run plan, grpo_cli.planning), run_state.py (what a run holds between phases, `TrainResult`; what `grpo
  train` does with its command line is grpo_cli/train_command.py, above this package), config.py (recipe ->
  GRPOConfig keyword arguments), trainer.py (the trainer with grpo's callbacks and hooks), time_record.py (the
  steady step measured against the time plan, its rates kept for this machine).
- Callbacks: callbacks.py (console, metrics.jsonl, graceful stop, `TrainerBound`), user_callbacks.py (the
  recipe's `callbacks:`), completions.py (completions.jsonl), task_metric.py (`eval.every_steps`, best/, early
  stop), suite_on_save.py (`eval.on_save`), health_guards.py and learning_guards.py (health guards).
- grpo's patches of TRL: hooks/ (the one ordered, version-checked list and its loop) and the modules it applies:
  vllm_cpu.py, resumable_sampler.py, async_cpu.py, shared_prompt_forward.py (a group's prompt through the loss
  forward once), fused_is.py (with kept_mass.py, the renormalisation over the
  tokens top_p/top_k/min_p kept), step_timing.py, shared_prefill.py, merged_generation.py (the LoRA adapter
  folded in while transformers generates), compiled_decode.py (the static cache's decode compiled), dynamic_sampling.py
  (with group_rows.py), zero_advantage.py, async_worker.py; async_grpo.py builds TRL's AsyncGRPOTrainer.
- The process: heap.py (glibc's heap thresholds), cuda_segments.py (CUDA's expandable segments), sharding.py
  (FSDP2 / ZeRO-3 on CPU, what each rank held).

Launching (accelerate, clusters, the vLLM server) is grpo_cli.launching; the report, samples, model card and
push are grpo_cli.artefacts. Importing this package stays light; transformers and TRL load when a run starts.
"""

from __future__ import annotations

from grpo_cli.training.run import TrainResult, is_main_process, train

__all__ = ["TrainResult", "is_main_process", "train"]
