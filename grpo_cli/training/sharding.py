"""Sharded training on machines without a GPU, and proof of what each process really held.

Two obstacles stood between the fsdp/zero3 profiles and a CPU machine:

- accelerate (1.x) decides the distributed type in `AcceleratorState`: it turns an FSDP launch into
  `DistributedType.FSDP` only from GPU-like types (MULTI_GPU, MULTI_XPU, ...), never from MULTI_CPU,
  so a CPU launch of the fsdp profile silently trained plain DDP. PyTorch's FSDP2 (`fully_shard`)
  works over gloo, and accelerate's FSDP2 code (prepare, state dicts, checkpoints) only needs the
  state to say FSDP: `adopt_fsdp_on_cpu` sets it before the trainer builds its Accelerator, which
  then reuses the shared state.
- DeepSpeed's CPU accelerator JIT-compiles a shared-memory all-reduce op when its communication
  backend starts (see `skip_deepspeed_cpu_inference_op`).

`ShardingProbe` measures the layout once training starts and refuses a run configured to shard that
ended up replicated; `gather_layout` collects every rank's count for the manifest.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from grpo_cli.errors import GrpoError
from grpo_cli.planning.topology import EVERY_STEPS_SHARDED_FIX


def _flag(name: str) -> bool:
    return os.environ.get(name, "false").lower() == "true"


def expected_layout() -> tuple[str | None, bool]:
    """(distributed type accelerate must run, whether parameters must be sharded), from what
    `accelerate launch` exported for its config file; (None, False) when no sharding was asked for."""
    if _flag("ACCELERATE_USE_FSDP"):
        return "FSDP", True
    if _flag("ACCELERATE_USE_DEEPSPEED"):
        return "DEEPSPEED", os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3"
    return None, False


def adopt_fsdp_on_cpu() -> bool:
    """Make accelerate's shared state FSDP for an FSDP launch on CPU; True if it did.

    Runs in each launched process after GRPOConfig (TrainingArguments resets accelerate's state when
    it sets up the device) and before the trainer builds its Accelerator. The plugin is read from the
    FSDP_* variables `accelerate launch` exported from the config file, as accelerate would.
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
        raise GrpoError("FSDP on CPU needs FSDP2, but the accelerate config asks for FSDP1",
                        where="launch.accelerate_config",
                        fix="Set `fsdp_config.fsdp_version: 2`, or start from the shipped "
                            "accelerate_configs/fsdp.yaml.")
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return True


def skip_deepspeed_cpu_inference_op() -> bool:
    """Stop DeepSpeed's CPU accelerator from JIT-compiling its shared-memory all-reduce op; True if skipped.

    DeepSpeed builds `deepspeed_shm_comm` with the C++ compiler whenever its communication backend
    starts on the CPU accelerator, although only inference all-reduce (tensor-parallel inference)
    uses it; ZeRO training communicates through torch.distributed (gloo). The build took 158 s on a
    loaded 2-core machine, needs a compiler, and waits forever on the lock file a killed build leaves
    behind, so ZeRO runs on CPU looked hung. Marking the op incompatible makes DeepSpeed skip it.
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


def _runtime_state() -> tuple[str, int, int]:
    """(distributed type name, number of processes, this process's index) as accelerate sees them."""
    from accelerate.state import PartialState

    state = PartialState()
    return str(state.distributed_type).split(".")[-1], state.num_processes, state.process_index


class ShardingProbe(TrainerCallback):
    """Measures, once the trainer has wrapped the model, what this rank holds; fails a run that was
    configured to shard (FSDP, ZeRO-3) but runs another distributed type or replicates the weights."""

    def __init__(self, evaluates_during_training: bool = False) -> None:
        self.layout: dict[str, Any] = {}
        self.evaluates_during_training = evaluates_during_training

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        kind, world, rank = _runtime_state()
        held, total = local_parameter_count(model) if model is not None else (0, 0)
        self.layout = {"type": kind, "world_size": world, "rank": rank, "held": held, "total": total}
        check_layout(kind, world, held, total)
        if self.evaluates_during_training and held < total:
            raise GrpoError(f"eval.every_steps evaluates on the main process alone, but under {kind} it holds only "
                            f"{held:,} of {total:,} parameters; generating would wait forever for the others",
                            where="eval.every_steps", fix=f"{EVERY_STEPS_SHARDED_FIX}, or train with `--profile ddp`.")


def check_layout(kind: str, world: int, held: int, total: int) -> None:
    """GrpoError when the run does not shard the way its accelerate launch asked for."""
    want, shard_params = expected_layout()
    if want is None or world < 2:
        return
    where = "launch.profile"
    if kind != want:
        raise GrpoError(f"the launch asked accelerate for {want} but it is running {kind}: the model is not "
                        "sharded the way the profile promises", where=where,
                        fix="Use `--profile ddp` if replicated training is what you want; otherwise report this "
                            "with `pip list` (accelerate/torch/deepspeed versions) and the launch line.")
    if shard_params and held >= total:
        raise GrpoError(f"{kind} is active but this process holds all {total:,} parameters: nothing is sharded",
                        where=where, fix="Check `launch.accelerate_config` (zero_stage 3 / FSDP full sharding), "
                                         "or use `--profile ddp` for replicated training.")


def gather_layout(probe: ShardingProbe) -> dict[str, Any]:
    """The run's layout for the manifest: type, world size, the parameters and peak memory of each rank.

    Every process must call it (it is a collective when several run); the result is the same on all.
    """
    layout = dict(probe.layout)
    if not layout:
        return {}
    import resource

    mine = (layout["held"], round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))  # KiB on Linux
    per_rank = [mine]
    if layout["world_size"] > 1:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, mine)
            per_rank = [tuple(g) for g in gathered]
    counts = [int(held) for held, _ in per_rank]
    want, _ = expected_layout()
    return {"type": layout["type"], "world_size": layout["world_size"], "parameters_total": layout["total"],
            "parameters_per_rank": counts, "sharded": max(counts) < layout["total"],
            "requested": want or layout["type"], "peak_rss_mib_per_rank": [int(rss) for _, rss in per_rank]}


def leave_together() -> None:
    """Hold every rank until rank 0 has finished its post-training work, then close the process group.

    Rank 0 alone evaluates and writes the report after training; a rank that exited meanwhile tore its
    communicator down under a live peer and was aborted (`terminate called without an active exception`),
    which failed the whole launch. The wait runs on a gloo group with a long timeout, so an evaluation
    longer than the main group's collective timeout does not trip it; if rank 0 fails instead, the
    launcher stops the waiting ranks.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    from datetime import timedelta

    group = dist.new_group(backend="gloo", timeout=timedelta(days=7))
    dist.barrier(group=group)
    dist.destroy_process_group()
