"""open-r1 recipes and TRL's `trl grpo --config` files: one flat YAML of ScriptArguments, ModelConfig and
GRPOConfig keys. open-r1 adds its reward registry, `system_prompt`, `chat_template` and its own callbacks."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from grpo_cli.importing.common import (
    NO_REWARD,
    ImportResult,
    as_list,
    map_model,
    map_output,
    map_training,
    map_vllm,
    number,
    rename_old_keys,
)
from grpo_cli.importing.fork import Fork, find_fork
from grpo_cli.importing.fork_rewards import ForkRewards, carry_own, fork_entry, fork_lines, fork_names, refuse_unread
from grpo_cli.importing.script_find import trlparser_scripts
from grpo_cli.suite_table import bundled_text

# open-r1's reward registry (src/open_r1/rewards.py get_reward_funcs) -> grpo built-in, and the script
# arguments that parameterise it -> the built-in's params.
OPENR1_REWARDS: dict[str, tuple[str, dict[str, str]]] = {
    "accuracy": ("accuracy", {}),
    "format": ("format", {}),
    "tag_count": ("tag_count", {}),
    "reasoning_steps": ("reasoning_steps", {}),
    "length": ("length", {}),
    "cosine": ("cosine", {"cosine_min_value_wrong": "min_value_wrong", "cosine_max_value_wrong": "max_value_wrong",
                          "cosine_min_value_correct": "min_value_correct",
                          "cosine_max_value_correct": "max_value_correct", "cosine_max_len": "max_len"}),
    "repetition_penalty": ("repetition_penalty", {"repetition_n_grams": "ngram_size",
                                                  "repetition_max_penalty": "max_penalty"}),
    "code": ("code", {}),
    "code_format": ("code_format", {"code_language": "language"}),
    "soft_overlong_punishment": ("soft_overlong_punishment", {"max_completion_len": "max_completion_len",
                                                              "soft_punish_cache": "soft_punish_cache"}),
}
OPENR1_GRADERS = {"ioi_code": "IOI problems graded by open-r1's piston/morph subtask grader",
                  "cf_code": "Codeforces problems graded by open-r1's checker-aware grader",
                  "binary_code": "open-r1's pass/fail variant of its remote code reward"}
# TRL's `trl grpo` registry (trl/scripts/grpo.py): the functions of trl.rewards, by name.
TRL_REWARDS = {"accuracy_reward": "trl.rewards:accuracy_reward",
               "reasoning_accuracy_reward": "trl.rewards:reasoning_accuracy_reward",
               "think_format_reward": "trl.rewards:think_format_reward"}
OPENR1_ONLY = {
    "callbacks": "open-r1's callbacks (push_to_hub_revision) are its own code: name a TrainerCallback in "
                 "`callbacks:` (module:Class) for the same hook",
    "benchmarks": "open-r1 runs these lighteval suites on each pushed revision; grpo's suites are "
                  f"{bundled_text(' and ')} (eval.suite)",
    "code_eval_test_batch_size": "open-r1's IOI/Codeforces graders batch tests; grpo's code reward runs every test",
    "code_eval_scoring_mode": "open-r1's Codeforces grader's scoring; grpo's code reward scores the fraction passed",
    "parallel_code_exec_per_proc": "grpo's code reward parallelism is the reward entry's `parallel:`",
    "e2b_router_url": "open-r1's E2B router is its own batching server; the code reward's `backend: e2b` talks to "
                      "E2B directly", "morph_router_url": "open-r1's Morph router is its own batching server; the "
                      "code reward's `backend: morph` talks to Morph directly",
    "ioi_provider": "IOI grading is open-r1's own", "enforce_same_language": "open-r1 code-reward option",
    "dataset_mixture": "mixtures of several datasets are not expressible: prepare one dataset (or files)",
    "overwrite_hub_revision": "open-r1's revision pushing", "push_to_hub_revision": "open-r1's revision pushing",
}


def _rewards(cfg: dict[str, Any], out: ImportResult, flavour: str, fork: ForkRewards | None = None,
             extract_to: Path | None = None) -> None:
    names = as_list(cfg.pop("reward_funcs", None), "reward_funcs", out.source)
    names = fork_names(fork.fork, names, out) if fork is not None else names
    given = as_list(cfg.pop("reward_weights", None), "reward_weights", out.source)
    weights = [number(w, f"reward_weights[{i}]", out.source) for i, w in enumerate(given)] or [1.0] * len(names)
    params_by_arg = {arg: (name, param) for name, (_, args) in OPENR1_REWARDS.items() for arg, param in args.items()}
    script_params = {k: cfg.pop(k) for k in list(cfg) if k in params_by_arg}
    entries: list[dict[str, Any]] = []
    model = cfg.pop("reward_model_name_or_path", None)
    if model:  # TRL puts the reward model first; reward_weights then has one more value, or none
        entries.append({"model": model} if len(weights) <= len(names) or weights[0] == 1.0
                       else {"model": model, "weight": float(weights[0])})
        weights = weights[1:] if len(weights) > len(names) else weights
    for name, weight in zip(names, weights, strict=False):
        forked = fork is not None and str(name) in fork.fork.registry and str(name) not in OPENR1_GRADERS
        stock, entry = fork_entry(fork, str(name), out) if fork is not None and forked else (True, None)
        entry = _reward_entry(str(name), script_params, out, flavour) if stock else entry
        if entry is not None:
            if float(weight) != 1.0:
                entry["weight"] = float(weight)
            entries.append(entry)
    _code_provider(cfg.pop("code_provider", None), entries, out)
    if fork is not None:
        carry_own(fork, entries, out, extract_to)
    if entries:
        out.put("rewards", entries)


def _code_provider(provider: Any, entries: list[dict[str, Any]], out: ImportResult) -> None:
    """open-r1's `code_provider` (e2b, morph, local) -> the code reward's `params.backend`."""
    code = [e for e in entries if e.get("name") == "code"]
    if provider is None or not code:
        if any(e.get("name") == "code" for e in entries):
            out.notes.append("open-r1 runs code on E2B by default; grpo's code reward runs it locally unless "
                             "`params.backend: e2b` (with $E2B_API_KEY) is set")
        return
    if provider in ("e2b", "morph"):
        for entry in code:
            entry.setdefault("params", {})["backend"] = provider
        if provider == "morph":
            out.notes.append("code_provider morph: give the snapshot to start as the code reward's "
                             "`params.backend_image`")
    elif provider != "local":
        out.drop("code_provider", provider, "not a code backend grpo knows (local, e2b, morph)")


def _reward_entry(name: str, script_params: dict[str, Any], out: ImportResult, flavour: str) -> dict[str, Any] | None:
    if flavour == "trl" and name in TRL_REWARDS:
        return {"function": TRL_REWARDS[name]}
    if ":" in name:  # a function of the script, of a file beside it (path.py:func) or of a module (module:func)
        return {"function": name}
    if flavour == "trl" and name == "get_soft_overlong_punishment":
        return {"name": "soft_overlong_punishment", "params": {"max_completion_len": 1280, "soft_punish_cache": 256}}
    if name in OPENR1_REWARDS:
        builtin, args = OPENR1_REWARDS[name]
        entry: dict[str, Any] = {"name": builtin}
        params = {param: script_params[arg] for arg, param in args.items() if arg in script_params}
        if builtin == "cosine" and flavour == "open-r1":
            params["length_unit"] = "characters"  # open-r1 measures len(content), its cosine_max_len in characters
        if params:
            entry["params"] = params
        if builtin in ("code", "code_format"):
            _code_columns(out)
        return entry
    if name in OPENR1_GRADERS:
        out.drop(f"reward_funcs[{name}]", name, f"{OPENR1_GRADERS[name]}: not a grpo reward; the `code` built-in "
                 "runs stdin/stdout and assert tests of Python programs")
        return None
    if "." in name:  # an import path, as `trl grpo` accepts: package.module.func
        module, _, func = name.rpartition(".")
        return {"function": f"{module}:{func}"}
    out.drop(f"reward_funcs[{name}]", name, "not a reward of the source tool's registry that grpo knows")
    return None


def _code_columns(out: ImportResult) -> None:
    """open-r1's code rewards read `verification_info` {language, test_cases}; grpo's read `tests`, `language`."""
    if out.get("data.columns") is None:
        out.put("data.columns", {"tests": "verification_info.test_cases", "language": "verification_info.language"})
        out.notes.append("open-r1 code data: data.columns takes tests and language out of verification_info; "
                         "grpo's code reward runs Python (rows in another language score 0)")


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
"""A hub repository id (ORG/NAME, or a canonical NAME), once `${VAR}` launcher placeholders are set aside."""
FROM_SCRIPT = "__script__"
"""cfg key: the keys were read from a script (its trainer names its eval data itself)."""
SCRIPT_KEYS = {"dataset_id_or_path": "dataset", "dataset_splits": "split"}
"""Keys a TrlParser script defines for itself (philschmid's run_r1_grpo.py and its many copies) that name data."""


def _data(cfg: dict[str, Any], out: ImportResult, flavour: str, fork: Fork | None = None) -> None:
    for key, target in SCRIPT_KEYS.items():
        if key in cfg and isinstance(cfg[key], str):
            value = cfg.pop(key)
            name = "dataset_name" if target == "dataset" else "dataset_train_split"
            cfg.setdefault(name, value)
            out.notes.append(f"{key}: {value} (the script's own key) -> data.{target}")
    if "dataset_name" in cfg:
        _dataset(str(cfg.pop("dataset_name")), out, fork.opens_dataset if fork is not None else "")
    if "dataset_files" in cfg:
        out.put("data.files", cfg.pop("dataset_files"))
    if cfg.get("dataset_config"):
        out.put("data.config", cfg["dataset_config"])
    cfg.pop("dataset_config", None)
    split = cfg.pop("dataset_train_split", "train")
    if split != "train":
        out.put("data.split", split)
    evaluates = str(cfg.get("eval_strategy", "no")) != "no"
    script = cfg.pop(FROM_SCRIPT, False)
    default = "test" if evaluates and not script else None  # ScriptArguments' default; a script names its own
    test = cfg.pop("dataset_test_split", default)
    if test and evaluates:
        out.put("data.eval_split", test)
    elif test:
        out.notes.append(f"dataset_test_split {test!r} is left out: the config never evaluates (eval_strategy no)")
    elif evaluates:
        out.drop("eval_strategy", cfg.get("eval_strategy"), "the source evaluates on data the config does not name: "
                 "give data.eval_split (a split of the same dataset) or data.eval_holdout")
        cfg.pop("eval_strategy", None)
    column = _prompt_column(cfg.pop("dataset_prompt_column", "prompt"), out, fork)
    system = cfg.pop("system_prompt", None)
    # open-r1 always builds a conversation; TRL hands a string prompt to the model as it is
    prompt: dict[str, Any] = {"column": column, "chat": bool(flavour == "open-r1" or system)}
    if system:
        prompt["system_prompt"] = system
    out.put("data.prompt", prompt)
    for key in ("dataset_streaming", "dataset_num_proc"):
        if key in cfg:
            out.drop(key, cfg.pop(key), "grpo loads the dataset itself (not streamed)")


def _dataset(name: str, out: ImportResult, opened_at: str = "") -> None:
    """A hub id -> data.dataset; a local file or directory (`data/train.json`) -> data.files, as is every name a fork's
    grpo.py opens itself as a file (`opened_at`: where)."""
    local = name.startswith((".", "/", "~")) or name.endswith((".json", ".jsonl", ".csv", ".parquet"))
    opened = f"the fork's grpo.py opens dataset_name as a local file ({opened_at})" if opened_at else ""
    if not local and not HUB_ID.fullmatch(re.sub(r"\$\{[^}]*\}", "x", name)):  # `<dataset-path>`: the source's blank
        if opened:
            out.refuse(f"data: dataset_name {name!r} is a blank the source leaves its user to fill, and {opened}, "
                       "never a hub dataset: give that file as data.files", "data.files", "LOCAL_FILE")
        else:
            out.refuse(f"data: dataset_name {name!r} is neither a hub dataset id (ORG/NAME) nor a path: a blank the "
                       "source leaves its user to fill; give the dataset (or data.files)", "data.dataset",
                       "HUB_DATASET_ID")
    elif local or opened:
        out.put("data.files", name)
        out.notes.append(f"{name} is a local path: data.files (relative to the recipe)" if not opened else
                         f"{name}: data.files (relative to the recipe), as {opened}")
    else:
        out.put("data.dataset", name)


def _prompt_column(column: str, out: ImportResult, fork: Fork | None) -> str:
    """The YAML's dataset_prompt_column, unless the fork's grpo.py builds every prompt from one column of its own."""
    if fork is None or fork.prompt_column is None or fork.prompt_column[0] == column:
        return column
    own, where = fork.prompt_column
    out.notes.append(f"data.prompt.column: {own}, not {column!r}: the fork's grpo.py builds each prompt's user message "
                     f"from the row's `{own}` ({where}), whatever the YAML's dataset_prompt_column says")
    return own


def _trlparser_yaml(out: ImportResult, source: str, keys: list[str]) -> None:
    """A YAML with a script's own keys and no rewards is a TrlParser script's launch config: point at the script."""
    scripts = trlparser_scripts(Path(source), keys)
    named = f"`{scripts[0]}`" if scripts else "the script it is launched with"
    out.problems.append(f"rewards: this YAML's own keys ({', '.join(keys)}) are those of a TrlParser script, which "
                        f"defines the rewards and the prompt: import {named} with this YAML as its --config")
    script = str(scripts[0]) if scripts else "SCRIPT.py"
    out.next_command = " ".join(shlex.quote(w) for w in ("grpo", "import", "trl", script, "--config", source))


def import_hf_yaml(cfg: dict[str, Any], source: str, flavour: str, extract_to: Path | None = None) -> ImportResult:
    """Translate an open-r1 (`flavour` open-r1) or `trl grpo` (trl) YAML config; an open-r1 recipe imported from
    its fork's checkout is read with the fork's reward registry (fork.py), its own functions copied beside
    `extract_to` (the recipe)."""
    out = ImportResult(source, flavour)
    found = find_fork(Path(source)) if flavour == "open-r1" else None
    fork = ForkRewards(found) if found is not None else None
    cfg = dict(cfg)
    script_keys = [k for k in SCRIPT_KEYS if k in cfg]
    rename_old_keys(cfg, out)
    map_model(cfg, out)
    _data(cfg, out, flavour, found)
    _rewards(cfg, out, flavour, fork, extract_to)
    if fork is not None:
        fork_lines(fork.fork, out)
        refuse_unread(fork, out)
    map_vllm(cfg, out, default_mode="server" if flavour == "open-r1" else "colocate")
    map_output(cfg, out)
    if cfg.get("num_processes"):  # `trl grpo` launches accelerate with this many processes (DDP)
        out.put("launch.profile", "ddp")
        out.put("launch.num_processes", number(cfg.pop("num_processes"), "num_processes", source, int))
    for key in [k for k in list(cfg) if k in OPENR1_ONLY]:
        out.drop(key, cfg.pop(key), OPENR1_ONLY[key])
    map_training(cfg, out)
    if "rewards" not in out.recipe and script_keys:
        _trlparser_yaml(out, source, script_keys)
    elif "rewards" not in out.recipe and not (fork is not None and fork.refused):
        out.refuse(NO_REWARD, "rewards", "[{function: FILE.py:FUNCTION}]")
    if out.get("launch.vllm.mode") and not out.get("launch.profile"):
        out.put("launch.profile", "single")
    return out
