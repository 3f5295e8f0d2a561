"""Training: recipe -> TRL GRPOTrainer, run on CPU, one GPU or many processes through accelerate.

- run.py: `train(recipe)` in named phases (prepare, build the trainer, train, finish).
- config.py: recipe -> GRPOConfig keyword arguments.
- callbacks.py / health.py: console, metrics.jsonl, graceful stop, health guards.
- launch.py: re-launch `grpo train` under accelerate (ddp, zero2/3, fsdp, multi-node).
- vllm_server.py: the `grpo vllm-serve` command, the wait for a server and stopping one.
- vllm_cpu.py / vllm_receiver.py: vLLM on CPU (environment, grpo's CPU weight sync: client and server side).
- task_metric.py: eval.every_steps (task metric, best/, early stop); completions.py: completions.jsonl.
- report.py: `grpo report` (curves PNG + Markdown summary), also written after every run.
Importing this package stays light; transformers and TRL load when a run starts.
"""

from __future__ import annotations

from grpo_cli.training.run import TrainResult, is_main_process, train

__all__ = ["TrainResult", "is_main_process", "train"]
