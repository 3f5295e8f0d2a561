"""The server side of grpo's CPU weight sync: a vLLM worker extension, loaded by `vllm serve`.

`grpo vllm-serve` on CPU passes `--worker-extension-cls grpo_cli.launching.vllm_receiver.WeightReceiver`,
so vLLM mixes this class into its worker and its methods answer vLLM's dev endpoint
`POST /collective_rpc` (VLLM_SERVER_DEV_MODE=1). TRL 1.16 syncs weights over NCCL only; this is the
path without CUDA (the client is grpo_cli.training.vllm_cpu). It runs inside vLLM's worker process,
so it imports nothing from grpo_cli.
"""

from __future__ import annotations

import base64
from typing import Any

PROTOCOL = "grpo-cpu-weight-sync/1"
RECEIVER = f"{__name__}.WeightReceiver"
"""What `vllm serve --worker-extension-cls` is given: this module's receiver class."""


def reload_into(runner: Any, named: Any) -> None:
    """Load checkpoint-format (name, tensor) pairs into a vLLM model runner so that its kernels use them.

    On CPU vLLM repacks each linear layer's weight for oneDNN after loading and drops the original, so
    writing into the parameters (TRL's colocate `load_weights`) would not reach the kernels: the runner's
    `reload_weights` restores the layers, loads and repacks. Its layerwise reload processes a tied weight
    once, in `embed_tokens`, which leaves the LM head's packed copy of the old embedding behind (measured:
    log-probs 2 nats off after one sync); those heads are repacked from the reloaded weight here.
    """
    runner.reload_weights(weights_iterator=named, is_checkpoint_format=True)
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    for module in runner.get_model().modules():
        if isinstance(module, VocabParallelEmbedding) and hasattr(module, "cpu_linear") and module.weight.numel():
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)


class WeightReceiver:
    """Receives the trainer's weights in chunks, then loads them all at once (`reload_into`)."""

    model_runner: Any  # vLLM's worker attribute

    def grpo_ping(self) -> str:
        """Proves the extension is loaded (the client checks it before the first sync)."""
        return PROTOCOL

    def grpo_stage_weights(self, payload: str) -> int:
        """Keep one chunk (base64 of a safetensors blob) until `grpo_load_staged`; returns tensors staged so far."""
        from safetensors.torch import load

        staged: dict[str, Any] = self.__dict__.setdefault("_grpo_staged", {})
        staged.update(load(base64.b64decode(payload)))
        return len(staged)

    def grpo_load_staged(self) -> int:
        """Load every staged tensor into the model (one reload, so each layer is repacked once)."""
        staged: dict[str, Any] = self.__dict__.pop("_grpo_staged", {})
        if staged:
            reload_into(self.model_runner, iter(staged.items()))
        return len(staged)

    def grpo_weight_digest(self, names: str) -> dict[str, list[float]]:
        """The first values of the named weights as vLLM holds them (a test reads them to prove a sync landed)."""
        wanted = set(names.split(","))
        params = dict(self.model_runner.get_model().named_parameters())
        return {n: params[n].detach().flatten()[:8].float().tolist() for n in wanted if n in params}
