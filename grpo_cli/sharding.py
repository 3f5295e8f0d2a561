"""Sharded training on machines without a GPU, and proof of what was sharded.

accelerate (1.x) decides the distributed type in `AcceleratorState`: it turns a launch with an FSDP
config into `DistributedType.FSDP` only from GPU-like types (MULTI_GPU, MULTI_XPU, ...), never from
MULTI_CPU, so a CPU launch of the fsdp profile silently trains plain DDP over gloo. PyTorch's FSDP2
(`fully_shard`) itself works over gloo, and accelerate's FSDP2 code path (prepare, state dicts,
checkpoints) only needs the state to say FSDP. `adopt_fsdp_on_cpu` sets that state once, before the
trainer creates its Accelerator (which then reuses the shared state).

`ShardingProbe` records what each rank really held, so the manifest proves the sharding and a run
configured to shard that ends up replicated fails instead of passing for sharded.
"""

from __future__ import annotations

import os
from typing import Any

from grpo_cli.errors import GrpoError

# Profiles whose parameters are split over the processes (zero2 shards only gradients/optimizer state).
PARAM_SHARDING_PROFILES = ("fsdp", "zero3")
EXPECTED_TYPE = {"ddp": "MULTI", "fsdp": "FSDP", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED"}


def _flag(name: str) -> bool:
    return os.environ.get(name, "false").lower() == "true"


def adopt_fsdp_on_cpu() -> bool:
    """Make accelerate's shared state FSDP for an FSDP launch on CPU; True if it did.

    Runs in each launched process before the trainer builds its Accelerator. The plugin is read from
    the FSDP_* variables `accelerate launch` exported from the config file, as accelerate would.
    """
    if not _flag("ACCELERATE_USE_FSDP") or not _flag("ACCELERATE_USE_CPU"):
        return False
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, TorchDynamoPlugin

    state = AcceleratorState(dynamo_plugin=TorchDynamoPlugin(), _from_accelerator=True)
    if state.distributed_type == DistributedType.FSDP:
        return True
    if state.distributed_type != DistributedType.MULTI_CPU:
        return False
    plugin = FullyShardedDataParallelPlugin()
    if plugin.fsdp_version != 2:
        raise GrpoError("FSDP on CPU needs FSDP2 (`fsdp_version: 2` in the accelerate config)",
                        where="launch.accelerate_config",
                        fix="Set `fsdp_config.fsdp_version: 2`, or start from the shipped accelerate_configs/fsdp.yaml.")
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return True


def skip_deepspeed_cpu_inference_op() -> bool:
    """Stop DeepSpeed's CPU accelerator from JIT-compiling its shared-memory all-reduce op; True if skipped.

    DeepSpeed builds `deepspeed_shm_comm` with the C++ compiler whenever its communication backend
    starts on the CPU accelerator, although only inference all-reduce (tensor-parallel inference)
    uses it; ZeRO training communicates through torch.distributed (gloo). The build takes minutes on
    a small machine, needs a compiler, and waits forever on a lock file left by a build that was
    killed, so a ZeRO run on CPU looked hung. Marking the op incompatible makes DeepSpeed skip it.
    """
    if not _flag("ACCELERATE_USE_DEEPSPEED") or os.environ.get("DS_ACCELERATOR") != "cpu":
        return False
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    return True


def local_parameter_count(model: Any) -> tuple[int, int]:
    """(elements this rank holds, elements of the whole model) for plain, FSDP2 and ZeRO-3 parameters."""
    held = total = 0
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        if hasattr(p, "ds_tensor"):  # DeepSpeed ZeRO-3: ds_numel is the full size, ds_tensor the local part
            held += p.ds_tensor.numel()
            total += p.ds_numel
        elif hasattr(p, "to_local"):  # FSDP2 DTensor
            held += p.to_local().numel()
            total += p.numel()
        else:
            held += p.numel()
            total += p.numel()
    return held, total
