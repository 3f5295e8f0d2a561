"""What every importer shares: the result (a recipe dict plus what was left out and why) and the mapping of
Hugging Face-style keys (TRL's ScriptArguments / ModelConfig / GRPOConfig, which open-r1 also uses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.hints import NOT_IN_TRL
from grpo_cli.recipe.schema.training import OWNED_ELSEWHERE, check_training_fields
from grpo_cli.recipe.trl_fields import grpo_config_fields

NO_REWARD = ("rewards: the source names no reward function grpo can read, and a recipe without one has nothing "
             "to train on (a placeholder would validate and train the wrong thing). Give the source's rewards, "
             "e.g. rewards='[{function: rewards.py:my_reward}]', or a built-in such as rewards='[{name: accuracy}]'")

ANSWERED_BY = {"data.files": "data.dataset"}
"""An override that answers another key's need: local files instead of the hub dataset asked for."""

# Keys whose value changes nothing (the default, or a flag transformers' Trainer never reads).
_IGNORED = {"do_eval": False}


@dataclass
class Unmapped:
    """One foreign key that did not make it into the recipe, and why."""

    key: str
    value: Any
    why: str


@dataclass
class ImportResult:
    """A recipe (as a plain dict, ready to write as YAML) and an honest account of the translation."""

    source: str
    kind: str
    recipe: dict[str, Any] = field(default_factory=dict)
    unmapped: list[Unmapped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """What the import itself knows the recipe lacks, each `key: what (where): fix`; it does not validate."""
    needs: dict[str, str] = field(default_factory=dict)
    """section.key -> the value to give on the command line (shown as a placeholder) to finish the recipe."""
    next_command: str | None = None
    """A different command finishes the import (a TrlParser YAML: import its script with it)."""
    extracted: tuple[Path, str] | None = None
    """The module rewards are copied into (its path, its text): written with the recipe once all checks passed."""
    rows_file: tuple[Path, str] | None = None
    """The JSONL of rows the source builds from constants (its path, its text): written with the recipe."""
    processes_hint: int | None = None
    """Training processes the source's launch implies (open-r1's `vllm_device: cuda:7`: GPUs 0-6 train)."""
    answers: dict[str, str] = field(default_factory=dict)
    """section.key of a need -> the problem that giving it answers (an override of that key clears it)."""

    @property
    def complete(self) -> bool:
        """Whether every key was carried over (notes are changes of form, not losses)."""
        return not self.unmapped

    def refuse(self, problem: str, key: str | None = None, value: str | None = None) -> None:
        """A problem the recipe has because of the import; with `key`, the override that finishes it."""
        self.problems.append(problem)
        if key is not None:
            self.needs[key] = value if value is not None else "..."
            self.answers[key] = problem

    def answered(self, key: str) -> None:
        """`key` was given (a command-line override): the problem asking for it is no longer one (validation still
        judges the value)."""
        for need in dict.fromkeys((key, ANSWERED_BY.get(key, key))):  # the key itself, or the one it stands for
            problem = self.answers.pop(need, None)
            if problem is not None and problem in self.problems:
                self.problems.remove(problem)
                self.needs.pop(need, None)

    def drop(self, key: str, value: Any, why: str) -> None:
        self.unmapped.append(Unmapped(key, value, why))

    def put(self, path: str, value: Any) -> None:
        """Set recipe[a][b][c] = value for path `a.b.c`."""
        node = self.recipe
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    def get(self, path: str) -> Any:
        node: Any = self.recipe
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


def number(value: Any, key: str, source: str, kind: type[int] | type[float] = float) -> Any:
    """`value` as an int or float; a word where a number belongs is the config's mistake, named by its key."""
    if not isinstance(value, bool) and isinstance(value, int | float | str):
        try:
            return kind(value)
        except ValueError:
            pass
    what = "a whole number" if kind is int else "a number"
    raise GrpoError(f"{key} is {value!r}, which is not {what}", where=source,
                    fix=f"Give {key} as {what} in the config"
                        + ("." if "[" in key else f" (e.g. `{key}: {4 if kind is int else 1.0}`)."))


def as_list(value: Any, key: str, source: str) -> list[Any]:
    """A list setting; one value is a list of one (`reward_funcs: accuracy`, not its characters)."""
    if value is None:
        return []
    if isinstance(value, str | int | float):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    raise GrpoError(f"{key} is {value!r}, where a list belongs", where=source,
                    fix=f"Write {key} as a YAML list, e.g. `{key}: [a, b]`.")


def as_mapping(value: Any, key: str, source: str) -> dict[str, Any]:
    """A section of settings (`trl:`, `vllm:`, one `datasets` entry)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    raise GrpoError(f"{key} is {value!r}, where a mapping of settings (key: value lines) belongs", where=source,
                    fix=f"Write {key} as indented `key: value` lines, as the source tool's documentation shows.")


def _dtype(value: Any) -> str | None:
    text = str(value).removeprefix("torch.")
    return {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
            "float32": "float32", "fp32": "float32", "auto": "auto"}.get(text)


def map_model(cfg: dict[str, Any], out: ImportResult) -> None:
    """model_name_or_path, model_revision, (torch_)dtype, attn_implementation, trust_remote_code, chat_template,
    and TRL's ModelConfig LoRA / quantization keys."""
    if "model_name_or_path" in cfg:
        out.put("model.name_or_path", str(cfg.pop("model_name_or_path")))
    if cfg.get("model_revision") not in (None, "main"):
        out.put("model.revision", str(cfg["model_revision"]))
    cfg.pop("model_revision", None)
    for key in ("torch_dtype", "dtype"):
        if key in cfg:
            value = cfg.pop(key)
            if _dtype(value):
                out.put("model.dtype", _dtype(value))
            else:
                out.drop(key, value, "not a dtype grpo knows (auto, bfloat16, float16, float32)")
    if "attn_implementation" in cfg:
        out.put("model.attn_implementation", cfg.pop("attn_implementation"))
    if cfg.get("trust_remote_code"):
        out.put("model.trust_remote_code", True)
    cfg.pop("trust_remote_code", None)
    if cfg.get("chat_template"):
        out.put("model.chat_template", cfg.pop("chat_template"))
    lora = {k: cfg.pop(k) for k in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules") if k in cfg}
    if cfg.pop("use_peft", False) or lora:
        section = {"r": lora.get("lora_r", 16), "alpha": lora.get("lora_alpha", 32)}
        if "lora_dropout" in lora:
            section["dropout"] = lora["lora_dropout"]
        if lora.get("lora_target_modules"):
            section["target_modules"] = lora["lora_target_modules"]
        out.put("model.lora", section)
    for bits in ("4", "8"):
        if cfg.pop(f"load_in_{bits}bit", False):
            out.put("model.quantization", f"{bits}bit")


def map_output(cfg: dict[str, Any], out: ImportResult) -> None:
    """output_dir, overwrite_output_dir, report_to, run_name, W&B keys and Hub uploads."""
    if "output_dir" in cfg:
        out.put("output.dir", str(cfg.pop("output_dir")))
    if cfg.pop("overwrite_output_dir", False):
        out.put("output.overwrite", "force")
        out.notes.append("overwrite_output_dir: true -> output.overwrite: force (the directory is set aside and "
                         "replaced; `resume` would continue it instead)")
    if "report_to" in cfg:
        value = cfg.pop("report_to")
        trackers = [value] if isinstance(value, str) else list(value or [])
        known = [t for t in trackers if t in ("tensorboard", "wandb", "trackio", "none")]
        out.put("output.report_to", known or ["none"])
        for other in [t for t in trackers if t not in known and t != "all"]:
            out.drop("report_to", other, "grpo reports to tensorboard, wandb or trackio")
    if "run_name" in cfg:
        out.put("output.run_name", cfg.pop("run_name"))
    if "project" in cfg:
        out.put("output.trackio_project", cfg.pop("project"))
    for key, target in (("wandb_entity", "entity"), ("wandb_project", "project"), ("wandb_run_group", "group")):
        if cfg.get(key):
            out.put(f"output.wandb.{target}", cfg[key])
        cfg.pop(key, None)
    map_hub(cfg, out)


def map_hub(cfg: dict[str, Any], out: ImportResult) -> None:
    """push_to_hub/hub_model_id -> one upload at the end (output.push_to_hub); per-save uploads are said."""
    push, repo = cfg.pop("push_to_hub", False), cfg.pop("hub_model_id", None)
    strategy = cfg.pop("hub_strategy", None)
    revision = cfg.pop("hub_model_revision", None)
    if push and not repo and not out.get("output.dir"):
        out.refuse("output.push_to_hub: the source pushes to the Hub (push_to_hub: true) but names no repository "
                   "(hub_model_id) nor output_dir, which transformers would name it after: give the repository",
                   "output.push_to_hub", "USER/REPO")
    elif push:
        target = str(repo or Path(str(out.get("output.dir"))).name)
        if not repo:
            out.notes.append(f"push_to_hub without hub_model_id: transformers names the repository after "
                             f"output_dir, {target}")
        out.put("output.push_to_hub", target)
        if "hub_private_repo" in cfg:
            out.put("output.hub_private", bool(cfg.pop("hub_private_repo")))
        owner = "" if "/" in target else " (no owner given: the logged-in user's namespace)"
        out.notes.append(f"push_to_hub -> output.push_to_hub: {target}{owner}, the final model once; for an upload "
                         f"at every save (hub_strategy {strategy or 'every_save'}) set training.push_to_hub: true "
                         "and training.hub_model_id instead")
    if revision:
        out.drop("hub_model_revision", revision, "open-r1 pushes each save to a branch of this name with its own "
                 "callback; grpo uploads the final model to the main branch")


VLLM_KEYS = {"vllm_server_host": "host", "vllm_server_port": "port", "vllm_server_timeout": "server_timeout",
             "vllm_server_base_url": "base_url", "vllm_gpu_memory_utilization": "gpu_memory_utilization",
             "vllm_tensor_parallel_size": "tensor_parallel_size", "vllm_enable_sleep_mode": "enable_sleep_mode",
             "vllm_max_model_length": "max_model_length"}


def map_vllm(cfg: dict[str, Any], out: ImportResult, default_mode: str) -> None:
    """use_vllm / vllm_mode and the vllm_* settings -> launch.vllm."""
    use = cfg.pop("use_vllm", False)
    mode = cfg.pop("vllm_mode", None)
    settings = {target: cfg.pop(key) for key, target in VLLM_KEYS.items() if key in cfg}
    if use:
        out.put("launch.vllm.mode", mode or default_mode)
        for target, value in settings.items():
            out.put(f"launch.vllm.{target}", value)
        if mode is None:
            out.notes.append(f"use_vllm: true -> launch.vllm.mode: {default_mode} (what the source tool runs by "
                             "default)")
    device = str(cfg.get("vllm_device", ""))
    if device.startswith("cuda:") and device[5:].isdigit() and int(device[5:]) > 0:
        out.processes_hint = int(device[5:])  # vLLM on the last GPU, training on the ones before it
    for key in ("vllm_device", "vllm_dtype"):
        if key in cfg:
            out.drop(key, cfg.pop(key), "not a setting of the installed TRL (vLLM picks its own device and dtype)")


RENAMED = {"evaluation_strategy": "eval_strategy", "vllm_max_model_len": "vllm_max_model_length",
           "use_liger": "use_liger_kernel"}
"""Older or other tools' names of a TRL setting: carried over under TRL's name, with a note."""


def rename_old_keys(cfg: dict[str, Any], out: ImportResult) -> None:
    for old, new in RENAMED.items():
        if old in cfg:
            value = cfg.pop(old)
            if new in cfg and cfg[new] != value:
                out.drop(old, value, f"an older name of {new}, which the config also sets ({cfg[new]!r})")
            else:
                cfg[new] = value
                out.notes.append(f"{old}: {value!r} -> {new} (TRL's name for it)")


def map_training(cfg: dict[str, Any], out: ImportResult) -> None:
    """What is left and is a GRPOConfig field goes to `training` (values checked); the rest is reported."""
    fields = grpo_config_fields()
    evaluates = str(cfg.get("eval_strategy") or "no") != "no"
    for key, value in list(cfg.items()):
        cfg.pop(key)
        if key in _IGNORED and value == _IGNORED[key]:
            continue
        if key == "do_eval" and value and evaluates:
            continue  # consistent with eval_strategy, which is what transformers reads
        if key == "do_eval" and value:
            out.drop(key, value, "transformers' Trainer never reads do_eval; set training.eval_strategy (and an "
                     "eval split) to evaluate during training")
            continue
        if key == "max_prompt_length":
            out.put("data.max_prompt_tokens", number(value, key, out.source, int))
            continue
        if key == "warmup_ratio":
            if value:
                out.put("training.warmup_steps", number(value, key, out.source))
                out.notes.append(f"warmup_ratio: {value} -> training.warmup_steps: {value} (transformers 5 reads "
                                 "a value below 1 as a ratio)")
            continue
        if key in OWNED_ELSEWHERE:
            out.drop(key, value, f"set by grpo from `{OWNED_ELSEWHERE[key]}`")
            continue
        if key not in fields:
            _unknown(key, value, fields, out)
            continue
        values, problems = check_training_fields({key: value})
        if problems:
            out.drop(key, value, f"the installed TRL rejects it: {problems[0][1]}")
            continue
        out.put(f"training.{key}", values[key])


def _unknown(key: str, value: Any, fields: Any, out: ImportResult) -> None:
    """A key the installed TRL does not know: left out with the reason, and a problem when it is one slip from a
    setting it does know (`learning_rat`), since the value the user meant would otherwise be lost quietly."""
    import difflib

    if key in NOT_IN_TRL:
        out.drop(key, value, NOT_IN_TRL[key])
        return
    close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.85)
    if close:  # the finishing command carries the value under the key it was one slip from
        out.refuse(f"{out.source}: {key} is not a setting the installed TRL knows; did you mean {close[0]}? "
                   f"Fix the key in the config (or give it as the override training.{close[0]}=VALUE).",
                   f"training.{close[0]}", override_value(value))
    out.drop(key, value, "not a setting grpo or the installed TRL's GRPOConfig knows"
             + (f" (did you mean {close[0]}?)" if close else ""))


def override_value(value: Any) -> str:
    """`value` as the right side of a `key=value` override, read back (as YAML) to the same value: a float keeps
    a dot (`1e-05` alone is a string to YAML), anything else is written as YAML flow."""
    import json

    if isinstance(value, float):
        text = repr(value)
        return text if "." in text or "e" not in text else text.replace("e", ".0e", 1)
    if isinstance(value, str):
        return value
    return json.dumps(value)
