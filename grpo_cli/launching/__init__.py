"""Launching: how `grpo train` and its vLLM server are started, on this machine or on a cluster.

- relaunch.py: re-launch `grpo train` under accelerate (ddp, zero2/3, fsdp, multi-node); accelerate_launch.py:
  `accelerate launch`, quiet on Ctrl-C.
- cluster.py: `grpo launch slurm|skypilot` (the layout and its problems, the SkyPilot task); slurm.py: the sbatch
  script, a het job with a vLLM node.
- vllm_server.py: the `grpo vllm-serve` command, the wait for a server and stopping one; vllm_receiver.py: the
  server-side worker extension of grpo's CPU weight sync (imports nothing from grpo_cli).
Importing this package stays light; nothing here imports torch, transformers or TRL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.launching.cluster import prepare_cluster, write_skypilot
    from grpo_cli.launching.relaunch import maybe_relaunch
    from grpo_cli.launching.slurm import submit_sbatch, write_slurm
    from grpo_cli.launching.vllm_server import stop_server, wait_for_server

__all__ = [
    "maybe_relaunch", "prepare_cluster", "stop_server", "submit_sbatch", "wait_for_server", "write_skypilot",
    "write_slurm",
]

__getattr__ = lazy_exports(__name__)
