"""`grpo import`: translate an open-r1, TRL or Axolotl GRPO config into a recipe, saying what did not map.

`import_config(kind, path)` returns an `ImportResult` (the recipe as a dict, unmapped keys with reasons,
notes on changes of form); `recipe_yaml(result)` writes it with that account as a comment header. Nothing
here imports torch or the source tools: configs are read as YAML, scripts with `ast`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.importing.common import ImportResult, Unmapped

KINDS = ("open-r1", "trl", "axolotl")

__all__ = ["KINDS", "ImportResult", "Unmapped", "import_config", "apply_overrides", "recipe_yaml", "rewards_module",
           "set_launch"]
_Dumper: Any = None


def _dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Multi-line strings (system prompts, chat templates) as `|` blocks, as a person writes them."""

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value and not any(c in value for c in "\t\r") and value == value.rstrip(" ") else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def _load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    from grpo_cli.paths import read_text

    try:
        data = yaml.safe_load(read_text(path, what="config", where=str(path)))
    except yaml.YAMLError as exc:
        raise GrpoError(f"not valid YAML: {str(exc).splitlines()[0]}", where=str(path),
                        fix="Give the config file the source tool reads.") from None
    if not isinstance(data, dict):
        raise GrpoError(f"expected a mapping of settings, got {type(data).__name__}", where=str(path))
    return data


def rewards_module(out: Path | None) -> Path:
    """Where `--extract-rewards` writes the rewards it copies: beside the recipe, named after it."""
    if out is None:
        raise GrpoError("--extract-rewards writes a module beside the recipe, and no recipe file is given",
                        where="--extract-rewards", fix="Give the recipe's path with -o recipe.yaml.")
    return out.with_name(f"{out.stem}_rewards.py")


def import_config(kind: str, path: str | Path, script_config: str | Path | None = None,
                  extract_to: Path | None = None) -> ImportResult:
    """Translate one foreign config (a YAML file, or for `trl` also a training script) into a recipe dict;
    `script_config` is the YAML a TrlParser script is launched with (`--config`); `extract_to` the module that
    rewards which cannot be referenced in place are copied into (`--extract-rewards`)."""
    from grpo_cli.importing.axolotl import import_axolotl
    from grpo_cli.importing.hf import import_hf_yaml

    path = Path(path)
    if kind not in KINDS:
        raise GrpoError(f"unknown config kind {kind!r}", where="KIND", fix=f"Use one of {', '.join(KINDS)}.")
    if script_config is not None and not (kind == "trl" and path.suffix == ".py"):
        raise GrpoError("--config names the YAML a TrlParser script is launched with", where="--config",
                        fix="Give it with `grpo import trl SCRIPT.py --config FILE.yaml`, or import the YAML alone.")
    if kind == "trl" and path.suffix == ".py":
        from grpo_cli.importing.script_import import import_script

        launch = _load_yaml(Path(script_config)) if script_config is not None else None
        return import_script(path, launch, Path(script_config) if script_config is not None else None, extract_to)
    cfg = _load_yaml(path)
    if kind == "axolotl":
        return import_axolotl(cfg, str(path))
    return import_hf_yaml(cfg, str(path), kind)


def set_launch(result: ImportResult, profile: str | None, num_processes: int | None) -> None:
    """How the source was launched (e.g. open-r1's `accelerate launch --config_file zero2.yaml --num_processes 7`),
    which its config file does not say: the batch arithmetic depends on it."""
    if profile:
        result.put("launch.profile", profile)
    if num_processes:
        result.put("launch.num_processes", num_processes)
        if result.get("launch.profile") in (None, "single"):
            result.put("launch.profile", "ddp")


def apply_overrides(result: ImportResult, overrides: list[str]) -> None:
    """`section.key=value` (the value read as YAML) on the converted recipe, noted in its header."""
    import yaml

    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise GrpoError(f"{item!r} is not a section.key=value setting", where="command line",
                            fix="Write e.g. model.name_or_path=Qwen/Qwen2.5-1.5B-Instruct.")
        result.put(key.strip(), yaml.safe_load(value))
        result.notes.append(f"{key.strip()} set on the command line")


def recipe_yaml(result: ImportResult) -> str:
    """The recipe as YAML, headed by what was converted from where and what was left out."""
    import yaml

    global _Dumper
    _Dumper = _Dumper or _dumper()
    lines = [f"# Converted by `grpo import {result.kind}` from {result.source}."]
    if result.unmapped:
        lines.append("# Not carried over:")
        lines += [f"#   {u.key}: {u.why}" for u in result.unmapped]
    lines += [f"# Note: {n}" for n in result.notes]
    order = ["description", "model", "data", "rewards", "tools", "environment", "callbacks", "training", "launch",
             "output", "eval"]
    recipe = {k: result.recipe[k] for k in order if k in result.recipe}
    recipe.update({k: v for k, v in result.recipe.items() if k not in recipe})
    body = yaml.dump(recipe, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return "\n".join(lines) + "\n" + body
