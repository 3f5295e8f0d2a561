"""TRL's AsyncGRPOTrainer without CUDA: the three places where TRL 1.16 assumes a GPU, each replaced at its hook.

1. Weight transfer: TRL's `WeightTransferClient` (async_grpo/weight_transfer.py) is NCCL only. The trainer takes
   any object with its `WeightTransferProtocol` methods (`weight_transfer=`); `CpuWeightTransfer` sends the
   weights through grpo's receiver on the server (launching/vllm_receiver.py), as server mode does on CPU.
2. Attention: the trainer packs a step's completions into a prefix tree and runs attention through
   `packing._flash_attn()`, a FlashAttention-3 CUDA kernel fetched from the Hub. `varlen_attention` is the same
   variable-length causal attention in plain torch (one SDPA call per tree segment).
3. MFU: `get_peak_flops_per_device` asks `torch.cuda.get_device_name`; on CPU there is no peak to report.

tests/training/test_async_grpo.py pins each hook against the installed TRL, so a TRL that moves one fails loudly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.launching.vllm_receiver import RECEIVER
from grpo_cli.training.vllm_cpu import rpc, send_weights


def varlen_attention(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                     max_seqlen_k: int, softmax_scale: float | None = None, causal: bool = True,
                     window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0, **_: Any) -> Any:
    """flash_attn_varlen_func on the CPU: q (N, H, D) and k, v (K, Hk, D) cut into segments by the cu_seqlens.

    As in FlashAttention, a causal mask with fewer queries than keys is aligned bottom-right: a segment's queries
    are the last tokens of its keys (the tree path that ends in the segment).
    """
    import torch

    if softcap:
        raise NotImplementedError("attention logit softcapping is not implemented for the CPU tree attention")
    out = torch.empty_like(q)
    left = window_size[0]
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for s in range(len(bounds_q) - 1):
        a, b, c, d = bounds_q[s], bounds_q[s + 1], bounds_k[s], bounds_k[s + 1]
        if b == a:
            continue
        lq, lk = b - a, d - c
        rows = torch.arange(lq)[:, None] + (lk - lq)
        cols = torch.arange(lk)[None, :]
        mask = cols <= rows if causal else torch.ones(lq, lk, dtype=torch.bool)
        if left >= 0:
            mask &= cols >= rows - left
        seg = torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[c:d].transpose(0, 1), v[c:d].transpose(0, 1), attn_mask=mask,
            scale=softmax_scale, enable_gqa=q.shape[1] != k.shape[1])
        out[a:b] = seg.transpose(0, 1)
    return out


class CpuFlashAttention:
    """What `packing._flash_attn()` returns on a GPU (the kernel module), for the CPU."""

    flash_attn_varlen_func = staticmethod(varlen_attention)


def _cpu_flash_attn() -> type[CpuFlashAttention]:
    return CpuFlashAttention


def _no_peak_flops(*_: Any, **__: Any) -> None:
    """No peak FLOPs for a CPU: TRL then logs throughput without MFU."""
    return None


def patch_trl_for_cpu() -> None:
    """Point TRL's async trainer at the CPU attention and MFU hooks (for this process; it trains on the CPU).

    TRL 1.16's private submodules, which TRL 1.18 removed: training/hooks/ applies this only on a verified TRL."""
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    packing._flash_attn = _cpu_flash_attn  # type: ignore[assignment]
    async_grpo_trainer.get_peak_flops_per_device = _no_peak_flops


class CpuWeightTransfer:
    """TRL's WeightTransferProtocol over grpo's CPU sync: pause the server, stage safetensors chunks on its
    receiver over `POST /collective_rpc`, load them in one reload, resume. Counts what it sent."""

    def __init__(self, base_url: str, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.syncs = 0
        self.tensors = 0
        self.seconds = 0.0

    def _post(self, url: str, json: dict[str, Any] | None = None, params: dict[str, str] | None = None) -> Any:
        import requests

        response = requests.post(url, json=json, params=params, timeout=self.timeout)
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered HTTP {response.status_code}: {response.text[:300]}")
        return response.json() if response.content else {}

    def init_weight_transfer(self) -> None:
        """The server must run grpo's receiver (`grpo vllm-serve` on CPU loads it)."""
        try:
            rpc(self._post, self.base_url, "grpo_ping")
        except Exception as exc:
            raise GrpoError(f"the vLLM server at {self.base_url} cannot take weights without CUDA "
                            f"({str(exc).splitlines()[0][:200]})", where="launch.vllm",
                            fix="Start it with `grpo vllm-serve RECIPE`, which on CPU loads grpo's weight receiver "
                                f"(`--worker-extension-cls {RECEIVER}`, VLLM_SERVER_DEV_MODE=1).") from None

    def pause(self) -> None:
        self._post(f"{self.base_url}/pause", params={"mode": "keep"})

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        start = time.perf_counter()
        self.tensors += send_weights(self._post, self.base_url, iterator)
        self.syncs += 1
        self.seconds += time.perf_counter() - start

    def resume(self) -> None:
        self._post(f"{self.base_url}/resume")

    def destroy(self) -> None:
        """Nothing to tear down: every sync is a set of HTTP requests."""
