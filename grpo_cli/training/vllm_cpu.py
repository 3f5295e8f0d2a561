"""vLLM generation without CUDA: the environment vLLM's CPU build needs, and grpo's CPU weight sync.

TRL 1.16 moves weights to a vLLM server over NCCL only (its client refuses a non-CUDA device), and
vLLM has no gloo/CPU weight-transfer backend. On CPU grpo swaps TRL's `VLLMClient` for a subclass
whose `init_communicator` / `update_named_params` send the weights through vLLM's dev endpoint
`POST /collective_rpc` to grpo's worker extension (vllm_receiver.py): safetensors chunks of at most
CHUNK_BYTES, base64 in JSON, then one reload. On a CUDA device the subclass is TRL's client unchanged.

Colocate mode on CPU needs a fix too: TRL writes each tensor into the vLLM model's parameters, but
vLLM's CPU linear layers run on weights repacked for oneDNN at load time, so the written values would
never be used. grpo routes the colocate sync through vLLM's `reload_weights`, which repacks
(vllm_receiver.reload_into, shared with the server side).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Iterator
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.launching.vllm_receiver import RECEIVER, reload_into
from grpo_cli.planning.vllm_support import cpu_env

CHUNK_BYTES = 64 << 20  # one /collective_rpc request carries at most this much raw tensor data


def _payload(tensors: dict[str, Any]) -> str:
    from safetensors.torch import save

    return base64.b64encode(save(tensors)).decode("ascii")


def chunks(named: Iterable[tuple[str, Any]], limit: int = CHUNK_BYTES) -> Iterator[dict[str, Any]]:
    """Group (name, tensor) pairs into dicts of at most `limit` bytes (a bigger tensor goes alone)."""
    batch: dict[str, Any] = {}
    size = 0
    for name, tensor in named:
        t = tensor.detach().to("cpu").contiguous().clone()  # safetensors wants owned, contiguous memory
        nbytes = t.numel() * t.element_size()
        if batch and size + nbytes > limit:
            yield batch
            batch, size = {}, 0
        batch[name] = t
        size += nbytes
    if batch:
        yield batch


def rpc(post: Any, base_url: str, method: str, *args: str) -> list[Any]:
    """Call a worker-extension method on every vLLM worker; the results, one per worker."""
    return post(f"{base_url}/collective_rpc", json={"method": method, "args": list(args)})["results"]


def send_weights(post: Any, base_url: str, named: Iterable[tuple[str, Any]], limit: int = CHUNK_BYTES) -> int:
    """Stream the weights to the server's receiver and load them; the number of tensors loaded."""
    for batch in chunks(named, limit):
        rpc(post, base_url, "grpo_stage_weights", _payload(batch))
    return int(rpc(post, base_url, "grpo_load_staged")[0])


def client_class() -> type:
    """TRL's VLLMClient with a CPU weight-sync path (the NCCL path stays TRL's on CUDA devices)."""
    import torch
    from trl.generation.vllm_client import VLLMClient

    class CpuWeightSyncClient(VLLMClient):
        """TRL's client; without CUDA its weight sync goes through grpo's receiver on the server."""

        cpu_sync = False

        def init_communicator(self, device: Any = 0) -> None:
            dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
            if dev.type == "cuda":
                return super().init_communicator(device)
            try:
                answer = rpc(self._post, self.base_url, "grpo_ping")
            except Exception as exc:  # the server answers, but has no receiver (or no dev mode)
                raise GrpoError(
                    f"the vLLM server at {self.base_url} cannot take weights without CUDA "
                    f"({str(exc).splitlines()[0][:200]})", where="launch.vllm",
                    fix="Start it with `grpo vllm-serve RECIPE`, which on CPU loads grpo's weight receiver "
                        f"(`--worker-extension-cls {RECEIVER}`, VLLM_SERVER_DEV_MODE=1).") from None
            self.cpu_sync = bool(answer)
            return None

        def update_named_params(self, metadata: list[Any], named_params: Iterator[tuple[str, Any]]) -> None:
            if not self.cpu_sync:
                return super().update_named_params(metadata, named_params)
            send_weights(self._post, self.base_url, named_params)
            return None

        def close_communicator(self) -> None:
            if not self.cpu_sync:
                super().close_communicator()

    return CpuWeightSyncClient


def _colocate_sync_on_cpu(self: Any) -> None:
    """TRL's VLLMGeneration.sync_weights for colocate mode on CPU: one reload (which repacks) instead of writes.

    TRL's `load_weights` per tensor fails on CPU (`'Parameter' object has no attribute 'weight_loader'` once
    vLLM has repacked the layers) or, where it passes, writes where the kernels no longer read.
    """
    runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
    reload_into(runner, ((n, p.detach()) for n, p in self._iter_named_params()))
    self.llm.reset_prefix_cache()


def vllm_on_cpu(mode: str, device: str) -> None:
    """Before TRL builds its trainer (and for the run after it): vLLM's CPU environment and grpo's CPU sync.

    A no-op unless vLLM is used and the run is on the CPU. The environment stays set (vLLM reads it
    when it starts); the client class and the colocate sync are swapped for the whole run.
    """
    if mode == "off" or device != "cpu":
        return
    for key, value in cpu_env().items():
        os.environ.setdefault(key, value)
    from trl.generation import vllm_generation

    if mode == "server":
        if getattr(vllm_generation.VLLMClient, "cpu_sync", None) is None:  # TRL's own class: swap once
            vllm_generation.VLLMClient = client_class()  # type: ignore[misc, assignment]
    elif not getattr(vllm_generation.VLLMGeneration.sync_weights, "grpo_cpu", False):
        original = vllm_generation.VLLMGeneration.sync_weights

        def sync_weights(self: Any) -> None:
            if self.mode == "colocate":
                return _colocate_sync_on_cpu(self)
            return original(self)

        sync_weights.grpo_cpu = True  # type: ignore[attr-defined]
        vllm_generation.VLLMGeneration.sync_weights = sync_weights  # type: ignore[method-assign]
