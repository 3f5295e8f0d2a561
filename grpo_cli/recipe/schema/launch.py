"""The `launch` section: how many processes, which distributed profile, where vLLM runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from grpo_cli.recipe.profiles import LaunchProfile, Profile, launch_profile
from grpo_cli.recipe.schema.common import Section, not_a_bool, omitted_section


class VllmSection(Section):
    """Generation with vLLM: the `vllm` extra on a GPU, or on CPU the environment scripts/install_vllm_cpu.sh builds."""

    mode: Literal["off", "auto", "colocate", "server", "async"] = "off"
    """off: transformers generate; auto: colocate where vLLM is installed, can serve the model and (on a CPU)
    `grpo validate`'s estimate says it makes the step shorter, else off (the plan says which and why);
    colocate: vLLM inside each training process; server: a separate
    `grpo vllm-serve` process on its own GPUs; async: the same server, with TRL's AsyncGRPOTrainer generating
    the next batches while the trainer learns from the current one (docs/distributed.md)."""
    host: str = "127.0.0.1"
    """Server mode: host of the vLLM server."""
    port: int = Field(8000, ge=1, le=65535)
    """Server mode: port of the vLLM server."""
    base_url: str | None = None
    """Server mode: full URL of the server (overrides host and port)."""
    server_timeout: float = Field(240.0, gt=0)
    """Server mode: seconds to wait for the server's health endpoint before giving up."""
    server_gpus: int = Field(1, ge=0)
    """Server mode: GPUs on the first node taken by the vLLM server (not available for training)."""
    gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    """Colocate mode: share of each GPU's memory that vLLM may take."""
    tensor_parallel_size: int = Field(1, ge=1)
    """Tensor parallel size of the vLLM engine."""
    enable_sleep_mode: bool = False
    """Colocate mode: offload vLLM weights and cache during the optimizer step to save memory (GPU only)."""
    max_model_length: int | None = Field(None, gt=0)
    """Context length for vLLM; defaults to the model's."""
    max_staleness: int = Field(1, ge=0, le=64)
    """Async mode: a completion is trained on only if the server sampled it at most this many weight syncs ago
    (older ones are dropped); TRL's `max_staleness`. 0 waits for every sync, as server mode does."""

    @property
    def uses_server(self) -> bool:
        """Generation runs on a separate `grpo vllm-serve` process (server and async mode)."""
        return self.mode in ("server", "async")

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        """YAML 1.1 reads an unquoted `off` as false (in a file and in `launch.vllm.mode=off`): it means off."""
        return "off" if value is False else value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        """The trainer and `grpo vllm-serve` both parse it; a port that is not a number crashed the latter."""
        if value is None:
            return value
        from urllib.parse import urlparse

        try:
            parsed = urlparse(value)
            port = parsed.port
        except ValueError:
            port, parsed = -1, urlparse("")
        if parsed.scheme not in ("http", "https") or not parsed.hostname or port == -1 or value != value.strip():
            raise ValueError(f"{value!r} is not an http(s) URL with a host (and a numeric port, if any), e.g. "
                             "http://10.0.0.7:8000")
        return value


class LaunchSection(Section):
    """Process layout; `grpo train` re-launches itself under `accelerate launch` when needed."""

    profile: Profile = "single"
    """cpu: force CPU; single: one process on one GPU if present, else CPU; ddp / zero2 / zero3 / fsdp:
    several processes through accelerate with the matching file in accelerate_configs/."""
    num_processes: int | None = Field(None, ge=1, le=65536)
    """Training processes across all machines (accelerate semantics). Defaults to 1 for cpu/single."""
    num_machines: int = Field(1, ge=1, le=65536)
    """Number of nodes."""
    machine_rank: int = Field(0, ge=0)
    """This node's rank (0 is the main node)."""
    main_process_ip: str | None = None
    """Address of the main node (multi-node only)."""
    main_process_port: int = Field(29500, ge=1, le=65535)
    """Rendezvous port on the main node."""
    threads: int | None = Field(None, ge=1, le=4096)
    """torch threads per training process (intra-op). Default: chosen at start from the cores that other
    work leaves free (load average), shared between the processes, one for a model under 20M parameters;
    `OMP_NUM_THREADS` set by you is honoured. The `code` reward's sandboxes get the free cores too
    (`rewards[].parallel` sets them). `grpo validate` prints the choice, `--threads N` overrides it."""
    price_per_hour: float | None = Field(None, gt=0, allow_inf_nan=False)
    """What one device-hour costs (one GPU; on the cpu profile, the machine), in any currency: `grpo validate`
    then prints the run's cost beside its time plan (`--price-per-hour` sets it for one command)."""
    accelerate_config: str | None = None
    """A custom accelerate config file (relative to the recipe) instead of the profile's."""
    vllm: VllmSection = omitted_section()
    """vLLM generation settings."""

    @field_validator("price_per_hour", mode="before")
    @classmethod
    def _price(cls, value: object) -> object:
        """`true` is not a price (pydantic would read it as 1, and the plan would print a cost of 1 per hour)."""
        return not_a_bool(value, "a price per device-hour (a finite number > 0, e.g. 2.5)")

    @model_validator(mode="after")
    def _consistent(self) -> LaunchSection:
        if not self.spec.multi_process and (self.num_processes or 1) > 1:
            raise ValueError(
                f"profile {self.profile!r} runs one process but num_processes={self.num_processes}: "
                "use `launch.profile: ddp` (or zero2/zero3/fsdp) for several processes"
            )
        if self.machine_rank >= self.num_machines:
            raise ValueError(f"machine_rank={self.machine_rank} must be below num_machines={self.num_machines}")
        if self.num_machines > 1 and not self.main_process_ip:
            raise ValueError("a multi-node run needs `launch.main_process_ip` (the address of the rank-0 node)")
        if self.spec.cpu_only and self.vllm.mode == "colocate" and self.vllm.enable_sleep_mode:
            raise ValueError("vLLM's sleep mode needs a GPU: set `launch.vllm.enable_sleep_mode: false` with "
                             "`launch.profile: cpu`")
        return self

    @property
    def spec(self) -> LaunchProfile:
        """The profile's row of the launch-profile table (grpo_cli.recipe.profiles): what it runs and shards."""
        return launch_profile(self.profile)

    @property
    def world_size(self) -> int:
        """Training processes in total: what TRL's batch arithmetic divides by."""
        return self.num_processes or 1
