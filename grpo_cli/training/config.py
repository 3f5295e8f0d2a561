"""Recipe -> TRL GRPOConfig keyword arguments: the training section plus what other sections own.

The recipe's `training` values pass through under TRL's own names; output, rewards, launch and vLLM
settings are mapped here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.planning.fast_generation import generation_path
from grpo_cli.recipe.schema import Recipe
from grpo_cli.training.compiled_decode import static_cache_settings


def grpo_config_kwargs(recipe: Recipe, out: Path, dtype: str, device: str) -> dict[str, Any]:
    """GRPOConfig keyword arguments: the recipe's training values plus what other sections own."""
    kw = dict(recipe.training.values())
    kw["output_dir"] = str(out)
    trackers = [t for t in recipe.output.report_to if t != "none"]
    kw["report_to"] = trackers or "none"
    kw["reward_weights"] = [float(e.weight) for e in recipe.rewards]
    if recipe.output.run_name:
        kw["run_name"] = recipe.output.run_name
    if recipe.output.trackio_project:
        kw["project"] = recipe.output.trackio_project
    kw.setdefault("disable_tqdm", True)  # grpo renders its own progress
    if device == "cpu":
        kw["use_cpu"] = True
    if "bf16" not in kw and "fp16" not in kw:
        # TRL defaults to bf16=True, which breaks CPU and pre-Ampere runs: follow the model dtype.
        kw["bf16"] = dtype == "bfloat16" and device != "cpu"
        kw["fp16"] = dtype == "float16" and device != "cpu"
    v = recipe.launch.vllm
    if v.mode != "off":
        kw.update(use_vllm=True, vllm_mode=v.mode, vllm_tensor_parallel_size=v.tensor_parallel_size)
        if v.mode == "colocate" and v.enable_sleep_mode and device == "cpu":
            raise GrpoError("vLLM's sleep mode needs a GPU, and this run is on the CPU",
                            where="launch.vllm.enable_sleep_mode", fix="Set `launch.vllm.enable_sleep_mode: false`.")
        if v.mode == "colocate":
            kw.update(vllm_gpu_memory_utilization=v.gpu_memory_utilization, vllm_enable_sleep_mode=v.enable_sleep_mode)
        else:
            kw.update(vllm_server_host=v.host, vllm_server_port=v.port, vllm_server_timeout=v.server_timeout)
            if v.base_url:
                kw["vllm_server_base_url"] = v.base_url
        if v.max_model_length:
            kw["vllm_max_model_length"] = v.max_model_length
    static_cache_settings(recipe, generation_path(recipe, cuda=device.startswith("cuda")), kw)
    return kw


def tracking_environment(recipe: Recipe) -> dict[str, str]:
    """The environment variables the trackers read their settings from (W&B, TensorBoard), for this run."""
    out = recipe.output
    env: dict[str, str] = {}
    if out.wandb is not None:
        for name, value in (("WANDB_ENTITY", out.wandb.entity), ("WANDB_PROJECT", out.wandb.project),
                            ("WANDB_RUN_GROUP", out.wandb.group), ("WANDB_TAGS", ",".join(out.wandb.tags))):
            if value:
                env[name] = value
    if out.tensorboard_dir:
        env["TENSORBOARD_LOGGING_DIR"] = str(Path(out.tensorboard_dir).expanduser())
    return env
