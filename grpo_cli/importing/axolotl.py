"""Axolotl GRPO configs (`rl: grpo`): top-level model/training keys in Axolotl's names, TRL's under `trl:`,
vLLM under `vllm:`, and data as `datasets:` whose `type` is a Python transform (`module.func`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_cli.importing.common import (
    NO_REWARD,
    ImportResult,
    as_list,
    as_mapping,
    map_hub,
    map_training,
    map_vllm,
    number,
    rename_old_keys,
)
from grpo_cli.importing.script_rewards import definition, module_file
from grpo_cli.importing.script_rows import axolotl_transform

# Axolotl's names -> TRL/transformers names (then mapped as any GRPOConfig key).
RENAMES = {"micro_batch_size": "per_device_train_batch_size", "num_epochs": "num_train_epochs",
           "lr_scheduler": "lr_scheduler_type", "optimizer": "optim", "eval_steps": "eval_steps",
           "weight_decay": "weight_decay", "max_grad_norm": "max_grad_norm"}
# Keys that describe Axolotl's own machinery, with why nothing here needs them.
AXOLOTL_ONLY = {
    "model_type": "the model class follows the model's config", "tokenizer_type": "the tokenizer follows the model",
    "strict": "Axolotl's config checking", "skip_prepare_dataset": "Axolotl's dataset pre-tokenisation",
    "dataset_prepared_path": "Axolotl's dataset cache", "sequence_len": "Axolotl's packing length: grpo bounds "
    "prompts with data.max_prompt_tokens and completions with training.max_completion_length",
    "sample_packing": "GRPO does not pack", "pad_to_sequence_len": "GRPO does not pack",
    "flash_attention": None, "sdp_attention": "set model.attn_implementation",
    "plugins": "Axolotl plugins are its own code", "wandb_name": None,
    "lora_model_dir": "load the adapter as the model instead", "special_tokens": None,
    "deepspeed": "pick launch.profile zero2/zero3", "fsdp": "pick launch.profile fsdp",
    "fsdp_config": "pick launch.profile fsdp", "val_set_size": None, "wandb_watch": "W&B gradient watching",
    "wandb_log_model": "W&B model upload",
}


def _model(cfg: dict[str, Any], out: ImportResult) -> None:
    if "base_model" in cfg:
        out.put("model.name_or_path", str(cfg.pop("base_model")))
    if cfg.get("trust_remote_code"):
        out.put("model.trust_remote_code", True)
    cfg.pop("trust_remote_code", None)
    if cfg.get("flash_attention"):
        out.put("model.attn_implementation", "flash_attention_2")
        out.notes.append("flash_attention: true -> model.attn_implementation: flash_attention_2")
    if cfg.get("attn_implementation"):
        out.put("model.attn_implementation", cfg.pop("attn_implementation"))
    template = cfg.pop("chat_template", None)
    if template not in (None, "tokenizer_default"):
        jinja = cfg.pop("chat_template_jinja", None)
        if jinja:
            out.put("model.chat_template", jinja)
        else:
            out.drop("chat_template", template, "Axolotl's named templates are its own: give the Jinja text in "
                     "model.chat_template")
    adapter = cfg.pop("adapter", None)
    if adapter in ("lora", "qlora"):
        lora: dict[str, Any] = {"r": cfg.pop("lora_r", 16), "alpha": cfg.pop("lora_alpha", 32)}
        if "lora_dropout" in cfg:
            lora["dropout"] = cfg.pop("lora_dropout")
        if cfg.pop("lora_target_linear", False):
            lora["target_modules"] = "all-linear"
        elif cfg.get("lora_target_modules"):
            lora["target_modules"] = cfg["lora_target_modules"]
        cfg.pop("lora_target_modules", None)
        out.put("model.lora", lora)
    for bits in ("4", "8"):
        if cfg.pop(f"load_in_{bits}bit", False):
            out.put("model.quantization", f"{bits}bit")
    for key in ("bf16", "fp16"):
        if cfg.get(key) is True:
            out.put("model.dtype", "bfloat16" if key == "bf16" else "float16")
    pad = as_mapping(cfg.pop("special_tokens", None), "special_tokens", out.source).get("pad_token")
    if pad:
        out.put("model.pad_token", pad)


def _transform(name: str, base: Path, out: ImportResult) -> None:
    """`datasets[0].type: module.func`, a row transform: carried as data.prompt / data.answer / data.columns when
    it builds a chat prompt from the row's columns, else listed."""
    module, _, func = name.rpartition(".")
    file = module_file(base, module)
    found = definition(file, func) if file is not None else None
    rows, line = axolotl_transform(found, func) if found is not None else (None, 0)
    if found is None or rows is None or rows.prompt is None:
        out.drop("datasets[0].type", name, "a Python transform of each row the importer cannot read: grpo assumes "
                 "it yields a chat `prompt` column (and keeps the others for rewards); write its work as "
                 "data.prompt / data.columns / data.answer")
        return
    out.put("data.prompt", rows.prompt)
    if rows.answer is not None:
        out.put("data.answer", rows.answer)
    if rows.columns:
        out.put("data.columns", rows.columns)
    out.notes.append(f"datasets[0].type {name} ({found.name}:{line}) builds a chat prompt from the row: "
                     "data.prompt" + (", data.columns" if rows.columns else ""))
    if rows.unread:
        out.drop("datasets[0].type", name, f"columns it computes ({', '.join(rows.unread)}) are not carried: "
                 "write them as data.columns / data.answer")


def _data(cfg: dict[str, Any], out: ImportResult, base: Path) -> None:
    datasets = [as_mapping(d, f"datasets[{i}]", out.source) for i, d in
                enumerate(as_list(cfg.pop("datasets", None), "datasets", out.source))]
    if not datasets:
        out.drop("datasets", None, "no dataset: a plugin's environment serves the prompts; grpo trains that way "
                 "from an `environment:` class with no `data:` (environment-only rows), which the config does not "
                 "name")
        out.put("data", {"files": "REPLACE_ME.jsonl", "prompt": {"column": "prompt", "chat": True}})
        return
    first = datasets[0]
    out.put("data.dataset", first.get("path"))
    if first.get("name"):
        out.put("data.config", first["name"])
    if first.get("split") not in (None, "train"):
        out.put("data.split", first["split"])
    out.put("data.prompt", {"column": "prompt", "chat": True})
    if first.get("type") and "." not in str(first["type"]):
        out.drop("datasets[0].type", first["type"], "an Axolotl prompt format: grpo reads a chat `prompt` column "
                 "(data.prompt.column) as it is")
    elif first.get("type"):
        _transform(str(first["type"]), base, out)
    for i, extra in enumerate(datasets[1:], start=1):
        out.drop(f"datasets[{i}]", extra.get("path"), "several datasets are not mixed: prepare one dataset")
    size = number(cfg.pop("val_set_size", 0) or 0, "val_set_size", out.source)
    if size > 0:  # a fraction, or (>= 1) a number of rows
        out.put("data.eval_holdout", size if size < 1 else int(size))


def _reference(name: str, base: Path) -> dict[str, Any]:
    """Axolotl's `module.func` (a module beside the config, or installed) as a grpo reward entry."""
    module, _, func = name.rpartition(".")
    if not module:
        return {"name": func}
    beside = base / f"{module.replace('.', '/')}.py"
    return {"function": f"{beside}:{func}" if beside.is_file() else f"{module}:{func}"}


def _rewards(trl: dict[str, Any], out: ImportResult, base: Path) -> None:
    names = as_list(trl.pop("reward_funcs", None), "trl.reward_funcs", out.source)
    weights = [number(w, f"trl.reward_weights[{i}]", out.source) for i, w in
               enumerate(as_list(trl.pop("reward_weights", None), "trl.reward_weights", out.source))]
    weights = weights or [1.0] * len(names)
    entries = []
    for name, weight in zip(names, weights, strict=False):
        entry = _reference(str(name), base)
        if weight != 1.0:
            entry["weight"] = weight
        entries.append(entry)
    for key in ("rollout_func", "environment_factory"):
        if key in trl:
            out.drop(f"trl.{key}", trl.pop(key), "a custom rollout is code: express its tools as `tools:` or an "
                     "`environment:` class")
    if not entries:
        out.refuse(NO_REWARD, "rewards", "[{function: FILE.py:FUNCTION}]")
        return
    out.put("rewards", entries)


def import_axolotl(cfg: dict[str, Any], source: str) -> ImportResult:
    """Translate an Axolotl `rl: grpo` config."""
    out = ImportResult(source, "axolotl")
    cfg = dict(cfg)
    if cfg.pop("rl", "grpo") != "grpo":
        out.notes.append("the config's `rl:` is not grpo: only its GRPO-relevant keys are carried over")
    _model(cfg, out)
    _data(cfg, out, Path(source).resolve().parent)
    trl = as_mapping(cfg.pop("trl", None), "trl", source)
    _rewards(trl, out, Path(source).resolve().parent)
    vllm = as_mapping(cfg.pop("vllm", None), "vllm", source)
    for key, value in vllm.items():
        if key in ("host", "port", "gpu_memory_utilization", "tensor_parallel_size") and f"vllm_{key}" not in trl:
            trl[f"vllm_server_{key}" if key in ("host", "port") else f"vllm_{key}"] = value
        elif key == "max_model_len":
            trl["vllm_max_model_length"] = value
    rename_old_keys(trl, out)
    map_vllm(trl, out, default_mode="server")
    for key in ("use_data_producer", "vllm_lora_sync", "async_prefetch"):
        if key in trl:
            out.drop(f"trl.{key}", trl.pop(key), "an Axolotl extension of TRL's trainer")
    project, entity = cfg.pop("wandb_project", None), cfg.pop("wandb_entity", None)
    if project or entity:
        out.put("output.wandb", {k: v for k, v in (("project", project), ("entity", entity)) if v})
        out.put("output.report_to", ["wandb"])
    if "output_dir" in cfg:
        out.put("output.dir", str(cfg.pop("output_dir")))
    if cfg.get("wandb_name"):
        out.put("output.run_name", cfg["wandb_name"])
    if cfg.get("hub_model_id"):  # Axolotl uploads whenever a repository is named
        map_hub({"push_to_hub": True, "hub_model_id": cfg.pop("hub_model_id"),
                 **{k: cfg.pop(k) for k in ("hub_strategy", "hub_private_repo") if k in cfg}}, out)
    for key in [k for k in list(cfg) if k in AXOLOTL_ONLY]:
        value, why = cfg.pop(key), AXOLOTL_ONLY[key]
        if why and value not in (False, None):
            out.drop(key, value, why)
    merged = {RENAMES.get(k, k): v for k, v in cfg.items() if k != "wandb_name"}
    merged = {**merged, **trl}
    rename_old_keys(merged, out)
    map_training(merged, out)
    if out.get("launch.vllm.mode") and not out.get("launch.profile"):
        out.put("launch.profile", "single")
    return out
