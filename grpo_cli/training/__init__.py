"""Training: recipe -> TRL GRPOTrainer, run on CPU, one GPU or many processes through accelerate.

- run.py: `train(recipe)` in named phases (prepare, build the trainer, train, finish).
- config.py: recipe -> GRPOConfig keyword arguments.
- callbacks.py / health.py: console, metrics.jsonl, graceful stop, health guards.
- vllm_cpu.py: vLLM on CPU during training (environment, grpo's CPU weight sync, client side).
- task_metric.py: eval.every_steps (task metric, best/, early stop); completions.py: completions.jsonl.
- command.py: what `grpo train` does with its command line (re-launch, resume).
Launching (accelerate, clusters, the vLLM server) is grpo_cli.launching; the report, samples, model card and
push are grpo_cli.artefacts.
Importing this package stays light; transformers and TRL load when a run starts.
"""

from __future__ import annotations

from grpo_cli.training.run import TrainResult, is_main_process, train

__all__ = ["TrainResult", "is_main_process", "train"]
