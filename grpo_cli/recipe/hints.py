"""Hints for unknown recipe keys: typos ("did you mean") and names from older guides.

Many GRPO blog posts and scripts predate TRL 1.x; their option names still reach us in
recipes. We keep TRL's current names and point from the old ones to the new.
"""

from __future__ import annotations

from collections.abc import Iterable

from grpo_cli.errors import did_you_mean
from grpo_cli.recipe.trl_fields import grpo_config_fields

# Old or foreign name -> (where it lives now, a short explanation).
MIGRATIONS: dict[str, tuple[str, str]] = {
    "kl_coef": ("training.beta", "TRL calls the KL coefficient `beta`"),
    "init_kl_coef": ("training.beta", "TRL calls the KL coefficient `beta`"),
    "kl_beta": ("training.beta", "TRL calls the KL coefficient `beta`"),
    "max_new_tokens": ("training.max_completion_length", "GRPOConfig limits completions with this name"),
    "max_length": ("training.max_completion_length", "GRPOConfig limits completions with this name"),
    "max_prompt_length": (
        "data.max_prompt_tokens",
        "TRL 1.16 dropped `max_prompt_length`; grpo filters or truncates prompts itself "
        "(see `data.prompt_overflow`)",
    ),
    "reward_function": ("rewards", "rewards are a top-level list of {name|function|model, weight, params}"),
    "reward_functions": ("rewards", "rewards are a top-level list of {name|function|model, weight, params}"),
    "reward_funcs": ("rewards", "rewards are a top-level list of {name|function|model, weight, params}"),
    "reward_weights": ("rewards[].weight", "each reward entry carries its own `weight`"),
    "num_samples": ("training.num_generations", "GRPO's group size is `num_generations`"),
    "group_size": ("training.num_generations", "GRPO's group size is `num_generations`"),
    "n_samples": ("training.num_generations", "GRPO's group size is `num_generations`"),
    "batch_size": ("training.per_device_train_batch_size", "TRL counts completions per device per step"),
    "warmup_ratio": ("training.warmup_steps", "transformers 5 folded it into `warmup_steps` (a float < 1 is a ratio)"),
    "evaluation_strategy": ("training.eval_strategy", "transformers renamed it `eval_strategy`"),
    "lr": ("training.learning_rate", "TRL's name is `learning_rate`"),
    "epochs": ("training.num_train_epochs", "TRL's name is `num_train_epochs`"),
    "cliprange": ("training.epsilon", "GRPO's clipping range is `epsilon` (and `epsilon_high`)"),
    "clip_range": ("training.epsilon", "GRPO's clipping range is `epsilon` (and `epsilon_high`)"),
    "model_name_or_path": ("model.name_or_path", "the model section holds the model id or directory"),
    "model_name": ("model.name_or_path", "the model section holds the model id or directory"),
    "torch_dtype": ("model.dtype", "the model section's `dtype` is auto|bfloat16|float16|float32"),
    "dataset_name": ("data.dataset", "the data section names the hub dataset"),
    "dataset_config": ("data.config", "the data section holds the dataset config name"),
    "dataset_train_split": ("data.split", "the data section holds the split name"),
    "dataset_test_split": ("data.eval_split", "the data section holds the eval split"),
    "system_prompt": ("data.prompt.system_prompt", "prompts are built by the data section"),
    "use_peft": ("model.lora", "LoRA is on when `model.lora` is given"),
    "lora_r": ("model.lora.r", "LoRA settings live under `model.lora`"),
    "lora_alpha": ("model.lora.alpha", "LoRA settings live under `model.lora`"),
    "lora_dropout": ("model.lora.dropout", "LoRA settings live under `model.lora`"),
    "lora_target_modules": ("model.lora.target_modules", "LoRA settings live under `model.lora`"),
    "load_in_4bit": ("model.quantization", "set `model.quantization: 4bit`"),
    "load_in_8bit": ("model.quantization", "set `model.quantization: 8bit`"),
    "output_dir": ("output.dir", "run outputs are configured in the output section"),
    "report_to": ("output.report_to", "trackers are configured in the output section"),
    "overwrite_output_dir": ("output.overwrite", "use `output.overwrite` or `grpo train --force`"),
    "use_vllm": ("launch.vllm.mode", "vLLM is configured in the launch section (off|colocate|server)"),
    "vllm_mode": ("launch.vllm.mode", "vLLM is configured in the launch section (off|colocate|server)"),
    "vllm_server_host": ("launch.vllm.host", "vLLM is configured in the launch section"),
    "vllm_server_port": ("launch.vllm.port", "vLLM is configured in the launch section"),
    "vllm_server_base_url": ("launch.vllm.base_url", "vLLM is configured in the launch section"),
    "vllm_gpu_memory_utilization": ("launch.vllm.gpu_memory_utilization", "vLLM is configured in launch"),
    "vllm_tensor_parallel_size": ("launch.vllm.tensor_parallel_size", "vLLM is configured in launch"),
    "vllm_enable_sleep_mode": ("launch.vllm.enable_sleep_mode", "vLLM is configured in launch"),
    "deepspeed": ("launch.profile", "choose `launch.profile: zero2|zero3` (see accelerate_configs/)"),
    "fsdp": ("launch.profile", "choose `launch.profile: fsdp` (see accelerate_configs/)"),
    "num_processes": ("launch.num_processes", "process counts live in the launch section"),
    "do_eval": ("training.eval_strategy", "transformers' Trainer never reads `do_eval`: evaluation during training "
                "is `training.eval_strategy` with data.eval_split, or grpo's `eval.every_steps`"),
    "wandb_project": ("output.wandb.project", "tracker settings live in the output section"),
    "wandb_entity": ("output.wandb.entity", "tracker settings live in the output section"),
    "run_name": ("output.run_name", "tracker settings live in the output section"),
    "chat_template": ("model.chat_template", "the chat template belongs to the model section"),
    "callbacks": ("callbacks", "callbacks are a top-level list of `module:Class` references"),
}


_REF_OFFLOAD = (
    "TRL 1.16's GRPOConfig has no option to offload only the reference model (it builds the reference as a full "
    "copy of the policy, placed like it). What does the job: `training.beta: 0` (TRL's default) loads no reference "
    "model at all; `model.lora` makes the reference the base model with the adapter switched off (no copy); "
    "`launch.profile: zero3` shards policy and reference alike across GPUs, and a `launch.accelerate_config` with "
    "DeepSpeed's `offload_param_device: cpu` offloads both")

# Names other tools use for something TRL 1.16 cannot do -> what to do instead (no recipe key to point at).
NOT_IN_TRL: dict[str, str] = {name: _REF_OFFLOAD for name in (
    "offload_ref_model", "ref_model_offload", "offload_reference_model", "reference_model_offload", "ref_offload",
    "ref_param_offload", "ref_model_cpu_offload", "offload_ref", "ref_model_offload_to_cpu")}


def unknown_key_hint(name: str, candidates: Iterable[str], here: str) -> str:
    """The fix sentence for an unknown key `name` found at path `here`."""
    if name in NOT_IN_TRL:
        return NOT_IN_TRL[name] + "."
    if name in MIGRATIONS:
        target, why = MIGRATIONS[name]
        if target.rsplit(".", 1)[-1] == name and here and target.rsplit(".", 1)[0] == here:
            return ""
        return f"`{name}` is a name from older guides: use `{target}` instead ({why})."
    guess = did_you_mean(name, candidates)
    if guess:
        return f"Did you mean `{guess}`?"
    if here == "" and name in grpo_config_fields():
        return f"`{name}` is a GRPOConfig field: put it under `training:` (`training.{name}`)."
    return "Run `grpo schema` or see docs/recipes.md for the valid keys."
