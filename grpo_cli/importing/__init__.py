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
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        opened = getattr(exc, "context_mark", None)
        if opened is not None and mark is not None and opened.line != mark.line and getattr(exc, "context", None):
            problem += f" ({exc.context} opened at line {opened.line + 1}, column {opened.column + 1})"
        raise GrpoError(f"not valid YAML{at}: {problem}", where=str(path),
                        fix="Fix the YAML there (the config file the source tool reads).") from None
    if data is None:
        raise GrpoError("the config is empty", where=str(path), fix="Give the config file the source tool reads.")
    if not isinstance(data, dict):
        raise GrpoError(f"expected a mapping of settings (key: value lines), got a {type(data).__name__}",
                        where=str(path), fix="Give the config file the source tool reads.")
    return data


_AXOLOTL_KEYS = ("rl", "base_model", "datasets", "micro_batch_size", "num_epochs")
_HF_KEYS = ("model_name_or_path", "dataset_name", "reward_funcs", "per_device_train_batch_size")


def _check_kind(kind: str, cfg: dict[str, Any], path: Path) -> None:
    """A config given as the wrong kind fails as "model is required": say which kind it looks like instead."""
    axolotl = [k for k in _AXOLOTL_KEYS if k in cfg]
    hf = [k for k in _HF_KEYS if k in cfg]
    if kind != "axolotl" and axolotl and "model_name_or_path" not in cfg:
        raise GrpoError(f"this looks like an Axolotl config ({', '.join(axolotl)}), not an `{kind}` config",
                        where=str(path), fix=f"Use `grpo import axolotl {path}`.")
    if kind == "axolotl" and hf and "base_model" not in cfg:
        raise GrpoError(f"this looks like an open-r1 or `trl grpo` config ({', '.join(hf)}), not an Axolotl one",
                        where=str(path), fix=f"Use `grpo import open-r1 {path}` (or `grpo import trl {path}`).")


def rewards_module(out: Path | None) -> Path:
    """Where `--extract-rewards` writes the rewards it copies: beside the recipe, named after it."""
    if out is None:
        raise GrpoError("--extract-rewards writes a module beside the recipe, and no recipe file is given",
                        where="--extract-rewards", fix="Give the recipe's path with -o recipe.yaml.")
    return out.with_name(f"{out.stem}_rewards.py")


def rows_file(out: Path) -> Path:
    """Where the rows a script builds from constants are written: beside the recipe, named after it."""
    return out.with_name(f"{out.stem}_rows.jsonl")


def import_config(kind: str, path: str | Path, script_config: str | Path | None = None,
                  extract_to: Path | None = None, rows_to: Path | None = None) -> ImportResult:
    """Translate one foreign config (a YAML file, or for `trl` also a training script) into a recipe dict;
    `script_config` is the YAML a TrlParser script is launched with (`--config`); `extract_to` the recipe beside
    which rewards that cannot be referenced in place are copied into a module (`rewards_module`); `rows_to` the
    recipe beside which rows a script builds from constants are written (`rows_file`)."""
    path = Path(path)
    if kind not in KINDS:
        raise GrpoError(f"unknown config kind {kind!r}", where="KIND", fix=f"Use one of {', '.join(KINDS)}.")
    if script_config is not None and not (kind == "trl" and path.suffix == ".py"):
        raise GrpoError("--config names the YAML a TrlParser script is launched with", where="--config",
                        fix="Give it with `grpo import trl SCRIPT.py --config FILE.yaml`, or import the YAML alone.")
    try:
        return _import(kind, path, script_config, extract_to, rows_to)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a shape no importer check foresaw
        raise GrpoError(f"a value has a form the {kind} importer cannot read ({type(exc).__name__}: {exc})",
                        where=str(path), fix="Compare the config with the source tool's documented format; "
                        "`grpo --debug import ...` shows where it failed.") from None
    except RecursionError:  # `'a' + 'a' + ...` a thousand times: Python's parser or the importer's readers
        raise GrpoError("an expression nests deeper than the importer can follow (Python's recursion limit)",
                        where=str(path), fix="Write the long expression in fewer levels (a list joined with "
                        "''.join, a loop), or give what it builds as a file or a hub dataset.") from None


def _import(kind: str, path: Path, script_config: str | Path | None, extract_to: Path | None,
            rows_to: Path | None) -> ImportResult:
    from grpo_cli.importing.axolotl import import_axolotl
    from grpo_cli.importing.hf import import_hf_yaml

    if kind == "trl" and path.suffix == ".py":
        from grpo_cli.importing.script_import import import_script

        launch = _load_yaml(Path(script_config)) if script_config is not None else None
        return import_script(path, launch, Path(script_config) if script_config is not None else None, extract_to,
                             rows_to)
    cfg = _load_yaml(path)
    _check_kind(kind, cfg, path)
    if kind == "axolotl":
        return import_axolotl(cfg, str(path))
    return import_hf_yaml(cfg, str(path), kind, extract_to)


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
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise GrpoError(f"the value of {item!r} is not valid YAML ({str(exc).splitlines()[0]})",
                            where="command line", fix="Quote it, e.g. key='[1, 2]', or give a plain value.") from None
        try:
            result.put(key.strip(), parsed)
        except (TypeError, AttributeError):
            raise GrpoError(f"{key.strip()!r} sets a key inside a value that is not a section", where="command line",
                            fix="Set the value itself (e.g. model.name_or_path=ORG/NAME).") from None
        result.answered(key.strip())
        result.notes.append(f"{key.strip()} set on the command line")
    given = [k for k in (i.partition("=")[0].strip() for i in overrides) if k in ("data", "data.dataset",
             "data.from_environment") or k.startswith("data.files")]
    if result.rows_file is not None and given:  # the data given here replaces the rows the source builds
        if result.get("data.files") == {"train": result.rows_file[0].name}:
            result.recipe["data"].pop("files")
        result.rows_file = None
        result.notes.append(f"the rows the source builds in code are not written: {given[0]} replaces them")


def recipe_yaml(result: ImportResult, mark: dict[str, Any] | None = None) -> str:
    """The recipe as YAML, headed by what was converted from where and what was left out; with `mark`, its
    `not_valid:` section first (recipe.marked: every command refuses the recipe while it is there)."""
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
    recipe: dict[str, Any] = {"not_valid": mark} if mark is not None else {}
    recipe.update({k: result.recipe[k] for k in order if k in result.recipe})
    recipe.update({k: v for k, v in result.recipe.items() if k not in recipe})
    body = yaml.dump(recipe, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return "\n".join(lines) + "\n" + body
